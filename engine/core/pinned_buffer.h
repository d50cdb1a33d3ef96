// PinnedHostBuffer: page-locked host memory (cudaMallocHost) for host-to-device staging. A copy
// on a stream from pageable memory is staged synchronously by the driver; from pinned memory it
// is a true asynchronous DMA that overlaps compute (TrainPipelineSparseDist's copy stage). Grows,
// never shrinks; reserve() keeps nothing of the old contents. Needs a CUDA build and a device.
#pragma once

#include <cstddef>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

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

// Host tensors copied into device buffers through one PinnedHostBuffer, a round at a time:
//   stager.begin(bytes); a = stager.copy(a_buf, host_a, stream); ...; stager.end(stream);
// Each copy is a true asynchronous DMA in the stream's order (from pageable memory the driver
// would first wait for the stream, stalling the host), and begin() reuses the staging only once
// the previous round's copies are done. CUDA devices only.
class HostToDeviceStager {
public:
    explicit HostToDeviceStager(Device device);

    // A round of copies of at most `bytes` host bytes (each counted as padded_bytes()).
    void begin(size_t bytes);
    // `src` (host) into the prefix of `buffer` (grown on the device as needed) in `stream`'s
    // order; returns that prefix, shaped like `src`.
    Tensor copy(Tensor& buffer, const Tensor& src, Stream& stream);
    // The staging is free again once `stream` passes this point.
    void end(Stream& stream);

    static size_t padded_bytes(const Tensor& t);  // 256-byte aligned, as the device likes them

private:
    Device device_;
    PinnedHostBuffer staging_;
    size_t offset_ = 0, limit_ = 0;  // this round's bytes used and announced
    Event done_;
};

}  // namespace shardrec
