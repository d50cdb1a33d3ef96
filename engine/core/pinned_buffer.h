// PinnedHostBuffer: page-locked host memory (cudaMallocHost) for host-to-device staging. A copy
// on a stream from pageable memory is staged synchronously by the driver; from pinned memory it
// is a true asynchronous DMA that overlaps compute (TrainPipelineSparseDist's copy stage). Grows,
// never shrinks; reserve() keeps nothing of the old contents. Needs a CUDA build and a device.
#pragma once

#include <cstddef>

namespace shardrec {

class PinnedHostBuffer {
public:
    PinnedHostBuffer() = default;
    ~PinnedHostBuffer();
    PinnedHostBuffer(PinnedHostBuffer&& o) noexcept;
    PinnedHostBuffer& operator=(PinnedHostBuffer&& o) noexcept;
    PinnedHostBuffer(const PinnedHostBuffer&) = delete;
    PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

    // At least `bytes` of capacity. The caller must know no stream still reads the old bytes.
    void reserve(size_t bytes);

    char* data() { return data_; }

    size_t capacity() const { return capacity_; }

private:
    char* data_ = nullptr;
    size_t capacity_ = 0;
};

}  // namespace shardrec
