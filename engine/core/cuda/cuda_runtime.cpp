// The CUDA runtime behind engine/core/cuda/cuda_runtime_api.h: stream-ordered pool allocations,
// copies, streams and events. Nothing here uses the legacy default stream.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "engine/core/cuda/cuda_check.h"
#include "engine/core/cuda/cuda_runtime_api.h"

namespace shardrec::cuda {
namespace {

// Allocations and frees that have no stream of their own are ordered on one per-thread stream.
cudaStream_t service_stream() {
    thread_local cudaStream_t s = [] {
        cudaStream_t made;
        SR_CUDA_CHECK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
        return made;
    }();
    return s;
}

// Every stream made by stream_create, with an event to mark how far it has been enqueued.
struct LiveStream {
    int device;
    cudaStream_t stream;
    cudaEvent_t marker;
};

struct Streams {
    std::mutex mutex;
    std::vector<LiveStream> live;
    std::vector<cudaStream_t> free_stream;  // per device; made on first use, never destroyed
};

Streams& streams() {
    static Streams* s = new Streams();  // outlives the static tensors freed at exit
    return *s;
}

}  // namespace

bool sync_check_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("SHARDREC_SYNC_CHECK");
        return v != nullptr && v[0] == '1';
    }();
    return on;
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no device" error
        return 0;
    }
    return n;
}

// The default pool returns freed memory to the driver at every synchronisation unless told to
// keep it; a training step frees and reallocates the same sizes, so the pool keeps everything.
// Nor may an allocation reuse a block whose free is still pending by making the service stream
// wait for it (internal dependencies): a free waits for every stream (see free()), so alloc()'s
// synchronisation would then wait for the compute stream.
void keep_pool_memory(int device) {
    static std::mutex mutex;
    static std::vector<bool> done;
    const std::lock_guard<std::mutex> lock(mutex);
    if (static_cast<size_t>(device) >= done.size())
        done.resize(static_cast<size_t>(device) + 1, false);
    if (done[static_cast<size_t>(device)])
        return;
    cudaMemPool_t pool;
    SR_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    SR_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    int internal_dependencies = 0;
    SR_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies,
                                          &internal_dependencies));
    done[static_cast<size_t>(device)] = true;
}

// Stream-ordered pool allocation, completed before it returns: the caller may use the memory on
// any stream. A free returns the memory to the pool only after every live stream of the device
// has passed the work enqueued on it so far, so a tensor may be dropped while kernels that read
// it are still queued (the next batch's forward regrows buffers while the previous backward
// runs); allocations reuse only blocks whose free has completed.
void set_device(int device) {
    SR_CUDA_CHECK(cudaSetDevice(device));
}

size_t free_bytes(int device) {
    SR_CUDA_CHECK(cudaSetDevice(device));
    size_t free = 0, total = 0;
    SR_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
}

void* alloc(int device, size_t bytes) {
    if (bytes == 0)
        return nullptr;
    SR_CUDA_CHECK(cudaSetDevice(device));
    keep_pool_memory(device);
    void* p = nullptr;
    SR_CUDA_CHECK(cudaMallocAsync(&p, bytes, service_stream()));
    SR_CUDA_CHECK(cudaStreamSynchronize(service_stream()));
    return p;
}

void free(int device, void* ptr) {
    SR_CUDA_WARN(cudaSetDevice(device));
    Streams& all = streams();
    const std::lock_guard<std::mutex> lock(all.mutex);
    if (static_cast<size_t>(device) >= all.free_stream.size())
        all.free_stream.resize(static_cast<size_t>(device) + 1, nullptr);
    cudaStream_t& fs = all.free_stream[static_cast<size_t>(device)];
    if (fs == nullptr)
        SR_CUDA_WARN(cudaStreamCreateWithFlags(&fs, cudaStreamNonBlocking));
    for (const LiveStream& s : all.live) {
        if (s.device == device) {
            SR_CUDA_WARN(cudaEventRecord(s.marker, s.stream));
            SR_CUDA_WARN(cudaStreamWaitEvent(fs, s.marker, 0));
        }
    }
    SR_CUDA_WARN(cudaFreeAsync(ptr, fs));
}

void copy(void* dst, bool dst_is_device, const void* src, bool src_is_device, size_t bytes) {
    const cudaMemcpyKind kind =
        dst_is_device ? (src_is_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                      : cudaMemcpyDeviceToHost;
    SR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, service_stream()));
    SR_CUDA_CHECK(cudaStreamSynchronize(service_stream()));
}

void memset_zero(void* dst, size_t bytes) {
    SR_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, service_stream()));
    SR_CUDA_CHECK(cudaStreamSynchronize(service_stream()));
}

void memset_zero_async(void* dst, size_t bytes, void* stream) {
    SR_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream)));
    SR_CUDA_LAUNCH_CHECK(static_cast<cudaStream_t>(stream));
}

void copy_async(void* dst,
                bool dst_is_device,
                const void* src,
                bool src_is_device,
                size_t bytes,
                void* stream) {
    const cudaMemcpyKind kind =
        dst_is_device ? (src_is_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                      : (src_is_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    SR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, static_cast<cudaStream_t>(stream)));
    SR_CUDA_LAUNCH_CHECK(static_cast<cudaStream_t>(stream));
}

void copy_2d_async(void* dst,
                   size_t dst_pitch,
                   bool dst_is_device,
                   const void* src,
                   size_t src_pitch,
                   bool src_is_device,
                   size_t row_bytes,
                   size_t rows,
                   void* stream) {
    const cudaMemcpyKind kind =
        dst_is_device ? (src_is_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                      : (src_is_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    SR_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, kind,
                                    static_cast<cudaStream_t>(stream)));
    SR_CUDA_LAUNCH_CHECK(static_cast<cudaStream_t>(stream));
}

void* host_alloc_pinned(size_t bytes) {
    void* p = nullptr;
    SR_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
}

void* host_alloc_mapped(size_t bytes, void** device_ptr) {
    void* p = nullptr;
    SR_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    SR_CUDA_CHECK(cudaHostGetDevicePointer(device_ptr, p, 0));
    return p;
}

void host_free_pinned(void* ptr) {
    SR_CUDA_WARN(cudaFreeHost(ptr));
}

void* stream_create(int device) {
    SR_CUDA_CHECK(cudaSetDevice(device));
    cudaStream_t s;
    SR_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t marker;
    SR_CUDA_CHECK(cudaEventCreateWithFlags(&marker, cudaEventDisableTiming));
    Streams& all = streams();
    const std::lock_guard<std::mutex> lock(all.mutex);
    all.live.push_back(LiveStream{device, s, marker});
    return s;
}

void stream_destroy(void* stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    // Its work finishes first: memory freed after this no longer waits for the stream (free()
    // waits for the live ones only), and an owner's tensors often outlive its streams.
    SR_CUDA_WARN(cudaStreamSynchronize(s));
    {
        Streams& all = streams();
        const std::lock_guard<std::mutex> lock(all.mutex);
        for (size_t i = 0; i < all.live.size(); ++i) {
            if (all.live[i].stream == s) {
                SR_CUDA_WARN(cudaEventDestroy(all.live[i].marker));
                all.live.erase(all.live.begin() + static_cast<std::ptrdiff_t>(i));
                break;
            }
        }
    }
    SR_CUDA_WARN(cudaStreamDestroy(s));
}

void stream_synchronize(void* stream) {
    SR_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void* event_create(int device, bool timing) {
    SR_CUDA_CHECK(cudaSetDevice(device));
    cudaEvent_t e;
    SR_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    return e;
}

void event_destroy(void* event) {
    SR_CUDA_WARN(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

void event_record(void* event, void* stream) {
    SR_CUDA_CHECK(
        cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

void stream_wait_event(void* stream, void* event) {
    SR_CUDA_CHECK(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}

void event_synchronize(void* event) {
    SR_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

bool event_query(void* event) {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady)
        return false;
    SR_CUDA_CHECK(e);
    return true;
}

float event_elapsed_ms(void* start, void* end) {
    float ms = 0.f;
    SR_CUDA_CHECK(
        cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
    return ms;
}

}  // namespace shardrec::cuda
