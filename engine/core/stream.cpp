#include "engine/core/stream.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/core/error.h"

namespace shardrec {

Stream::Stream(Device device) : device_(device) {
    if (device_.is_cuda())
        handle_ = cuda::stream_create(device_.index);
}

Stream::~Stream() {
    if (handle_ != nullptr)
        cuda::stream_destroy(handle_);
}

Stream::Stream(Stream&& o) noexcept
    : device_(o.device_), handle_(std::exchange(o.handle_, nullptr)) {}

Stream& Stream::operator=(Stream&& o) noexcept {
    if (this != &o) {
        if (handle_ != nullptr)
            cuda::stream_destroy(handle_);
        device_ = o.device_;
        handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
}

void Stream::synchronize() {
    if (handle_ != nullptr)
        cuda::stream_synchronize(handle_);
}

Stream& Stream::cpu() {
    static Stream s(Device::cpu());
    return s;
}

Event::Event(Device device, bool timing) : device_(device) {
    if (device_.is_cuda())
        handle_ = cuda::event_create(device_.index, timing);
}

Event::~Event() {
    if (handle_ != nullptr)
        cuda::event_destroy(handle_);
}

Event::Event(Event&& o) noexcept
    : device_(o.device_), handle_(std::exchange(o.handle_, nullptr)), recorded_s_(o.recorded_s_) {}

Event& Event::operator=(Event&& o) noexcept {
    if (this != &o) {
        if (handle_ != nullptr)
            cuda::event_destroy(handle_);
        device_ = o.device_;
        handle_ = std::exchange(o.handle_, nullptr);
        recorded_s_ = o.recorded_s_;
    }
    return *this;
}

void Event::record(Stream& stream) {
    if (handle_ != nullptr) {
        cuda::event_record(handle_, stream.handle());
        return;
    }
    recorded_s_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Event::wait(Stream& stream) {
    if (handle_ != nullptr)
        cuda::stream_wait_event(stream.handle(), handle_);
}

void Event::synchronize() {
    if (handle_ != nullptr)
        cuda::event_synchronize(handle_);
}

bool Event::query() {
    return handle_ == nullptr || cuda::event_query(handle_);
}

double Event::elapsed_ms(const Event& start, const Event& end) {
    SR_CHECK(start.device_ == end.device_, "Event::elapsed_ms: events of {} and {}",
             start.device_.str(), end.device_.str());
    if (start.handle_ != nullptr)
        return cuda::event_elapsed_ms(start.handle_, end.handle_);
    return (end.recorded_s_ - start.recorded_s_) * 1e3;
}

void copy_async(void* dst,
                Device dst_device,
                const void* src,
                Device src_device,
                size_t bytes,
                Stream& stream) {
    if (bytes == 0)
        return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
        std::memcpy(dst, src, bytes);
        return;
    }
    SR_CHECK(stream.device().is_cuda(), "copy_async: a copy to or from {} needs a CUDA stream",
             dst_device.is_cuda() ? dst_device.str() : src_device.str());
    cuda::copy_async(dst, dst_device.is_cuda(), src, src_device.is_cuda(), bytes, stream.handle());
}

void memset_zero_async(void* dst, Device device, size_t bytes, Stream& stream) {
    if (bytes == 0)
        return;
    if (device.is_cpu()) {
        std::memset(dst, 0, bytes);
        return;
    }
    SR_CHECK(stream.device().is_cuda(), "memset_zero_async: {} needs a CUDA stream", device.str());
    cuda::memset_zero_async(dst, bytes, stream.handle());
}

void copy_2d_async(void* dst,
                   size_t dst_pitch,
                   Device dst_device,
                   const void* src,
                   size_t src_pitch,
                   Device src_device,
                   size_t row_bytes,
                   size_t rows,
                   Stream& stream) {
    if (row_bytes == 0 || rows == 0)
        return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
        for (size_t r = 0; r < rows; ++r) {
            std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                        static_cast<const char*>(src) + r * src_pitch, row_bytes);
        }
        return;
    }
    SR_CHECK(stream.device().is_cuda(), "copy_2d_async: a copy to or from {} needs a CUDA stream",
             dst_device.is_cuda() ? dst_device.str() : src_device.str());
    cuda::copy_2d_async(dst, dst_pitch, dst_device.is_cuda(), src, src_pitch, src_device.is_cuda(),
                        row_bytes, rows, stream.handle());
}

}  // namespace shardrec
