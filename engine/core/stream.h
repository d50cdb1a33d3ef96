// Stream and Event: ordered queues of device work. On the CPU every op runs synchronously on the
// calling thread, so a CPU stream is an in-order no-op; on CUDA they wrap real streams and events
// through the opaque handles of engine/core/cuda/cuda_runtime_api.h.
#pragma once

#include <cstddef>

#include "engine/core/device.h"

namespace shardrec {

class Stream {
public:
    explicit Stream(Device device = Device::cpu());
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    Stream(Stream&& o) noexcept;
    Stream& operator=(Stream&& o) noexcept;

    Device device() const { return device_; }

    void* handle() const { return handle_; }  // cudaStream_t on CUDA, nullptr on CPU

    void synchronize();

    // The shared in-order stream for CPU work.
    static Stream& cpu();

private:
    Device device_;
    void* handle_ = nullptr;
};

class Event {
public:
    // timing: the event can be an end of elapsed_ms (CUDA events without it are cheaper).
    explicit Event(Device device = Device::cpu(), bool timing = false);
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    Event(Event&& o) noexcept;
    Event& operator=(Event&& o) noexcept;

    void record(Stream& stream);
    void wait(Stream& stream);  // makes `stream` wait for this event
    void synchronize();         // blocks the host until the event has completed
    bool query();               // true when the work it recorded has completed (CPU: always)

    // Milliseconds from start's record to end's, both timing events of one device, completed
    // (CPU: the time between the record calls, the work before each being done by then).
    static double elapsed_ms(const Event& start, const Event& end);

private:
    Device device_;
    void* handle_ = nullptr;
    double recorded_s_ = 0;  // CPU: steady-clock seconds at the last record
};

// Copies `bytes` in `stream`'s order: asynchronous on CUDA (a host side overlaps only when it is
// pinned, see PinnedHostBuffer), a memcpy done on return between host buffers.
void copy_async(
    void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream& stream);

// Zeroes `bytes` at dst in `stream`'s order (a memset on return on the host).
void memset_zero_async(void* dst, Device device, size_t bytes, Stream& stream);

// Copies `rows` rows of `row_bytes` each, row r from src + r * src_pitch to dst + r * dst_pitch,
// in `stream`'s order (one cudaMemcpy2DAsync; between host buffers a memcpy per row, done on
// return). Column blocks of row-major matrices: concatenation along dim 1 and its inverse.
void copy_2d_async(void* dst,
                   size_t dst_pitch,
                   Device dst_device,
                   const void* src,
                   size_t src_pitch,
                   Device src_device,
                   size_t row_bytes,
                   size_t rows,
                   Stream& stream);

}  // namespace shardrec
