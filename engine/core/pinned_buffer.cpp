#include "engine/core/pinned_buffer.h"

#include <utility>

#include "engine/core/cuda/cuda_runtime_api.h"

namespace shardrec {

PinnedHostBuffer::~PinnedHostBuffer() {
    if (data_ != nullptr)
        cuda::host_free_pinned(data_);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), capacity_(std::exchange(o.capacity_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
    if (this != &o) {
        if (data_ != nullptr)
            cuda::host_free_pinned(data_);
        data_ = std::exchange(o.data_, nullptr);
        capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
}

// Doubling keeps the number of (slow, page-locking) allocations logarithmic in the peak size.
void PinnedHostBuffer::reserve(size_t bytes) {
    if (bytes <= capacity_)
        return;
    size_t grown = capacity_ == 0 ? bytes : capacity_;
    while (grown < bytes)
        grown *= 2;
    if (data_ != nullptr)
        cuda::host_free_pinned(data_);
    data_ = nullptr;
    capacity_ = 0;
    data_ = static_cast<char*>(cuda::host_alloc_pinned(grown));
    capacity_ = grown;
}

}  // namespace shardrec
