// PinnedHostBuffer: page-locked host memory (cudaMallocHost) for host-to-device staging. A copy
// on a stream from pageable memory is staged synchronously by the driver; from pinned memory it
// is a true asynchronous DMA that overlaps compute (TrainPipelineSparseDist's copy stage). Grows,
// never shrinks; reserve() keeps nothing of the old contents. Needs a CUDA build and a device.
#pragma once

#include <cstddef>
#include <vector>

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
//   stager.begin(bytes); a = stager.copy(a_buf, host_a); ...; stager.end(stream);
// copy() fills the staging on the host; end() enqueues the round's copies on the stream, each a
// true asynchronous DMA (from pageable memory the driver would first wait for the stream,
// stalling the host), so an event recorded just before end() times the transfers alone.
// begin() reuses the staging only once the previous round's copies are done. CUDA devices only.
class HostToDeviceStager {
public:
    explicit HostToDeviceStager(Device device);

    // A round of copies of at most `bytes` host bytes (each counted as padded_bytes()).
    void begin(size_t bytes);
    // `src` (host) staged for the prefix of `buffer` (grown on the device as needed); returns
    // that prefix, shaped like `src`, which holds `src` once the stream of end() passes it.
    Tensor copy(Tensor& buffer, const Tensor& src);
    // Enqueues the round's copies on `stream`; the staging is free again once it passes them.
    void end(Stream& stream);

    static size_t padded_bytes(const Tensor& t);  // 256-byte aligned, as the device likes them

private:
    struct Pending {
        void* dst;
        const char* src;
        size_t bytes;
    };

    Device device_;
    PinnedHostBuffer staging_;
    size_t offset_ = 0, limit_ = 0;  // this round's bytes used and announced
    std::vector<Pending> pending_;   // this round's copies, enqueued by end()
    Event done_;
};

}  // namespace shardrec
