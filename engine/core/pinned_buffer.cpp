#include "engine/core/pinned_buffer.h"

#include <cstring>
#include <utility>

#include "engine/core/allocator.h"
#include "engine/core/error.h"

namespace shardrec {

PinnedHostBuffer::~PinnedHostBuffer() {
    pinned_free(data_, capacity_);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), capacity_(std::exchange(o.capacity_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
    if (this != &o) {
        pinned_free(data_, capacity_);
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
    pinned_free(data_, capacity_);
    data_ = nullptr;
    capacity_ = 0;
    data_ = static_cast<char*>(pinned_alloc(grown));
    capacity_ = grown;
}

HostToDeviceStager::HostToDeviceStager(Device device) : device_(device), done_(device) {
    SR_CHECK(device.is_cuda(), "HostToDeviceStager: {} is not a CUDA device", device.str());
}

size_t HostToDeviceStager::padded_bytes(const Tensor& t) {
    constexpr size_t kAlignment = 256;
    return (t.nbytes() + kAlignment - 1) / kAlignment * kAlignment;
}

void HostToDeviceStager::begin(size_t bytes) {
    SR_CHECK(pending_.empty(), "HostToDeviceStager::begin: the previous round has no end()");
    done_.synchronize();  // the previous round's copies have read the staging
    staging_.reserve(bytes);
    offset_ = 0;
    limit_ = bytes;
}

Tensor HostToDeviceStager::copy(Tensor& buffer, const Tensor& src) {
    SR_CHECK(src.device().is_cpu(), "HostToDeviceStager::copy: the source {} is not on the host",
             src.str());
    const size_t n = padded_bytes(src);
    SR_CHECK(offset_ + n <= limit_, "HostToDeviceStager::copy: {} beyond the {} bytes of begin()",
             src.str(), limit_);
    char* pinned = staging_.data() + offset_;
    std::memcpy(pinned, src.data_ptr(), src.nbytes());
    Tensor view = grow_prefix(buffer, src.numel(), src.dtype(), device_).view(src.shape());
    pending_.push_back(Pending{view.data_ptr(), pinned, src.nbytes()});
    offset_ += n;
    return view;
}

void HostToDeviceStager::end(Stream& stream) {
    for (const Pending& p : pending_)
        copy_async(p.dst, device_, p.src, Device::cpu(), p.bytes, stream);
    pending_.clear();
    done_.record(stream);
}

}  // namespace shardrec
