// The CUDA runtime services engine/core needs, behind plain C++ signatures so no CUDA type leaks
// into engine headers (STYLE.md R1). Defined in engine/core/cuda/*.cpp when CUDA is built, and by
// kernels/cuda/disabled.cpp (throwing "built without CUDA") otherwise.
#pragma once

#include <cstddef>

namespace shardrec::cuda {

int device_count();           // 0 when built without CUDA or when no device is visible
void set_device(int device);  // the calling thread's current device (cuBLAS, kernel launches)
// Bytes free on the device now (cudaMemGetInfo), for the memory check before a run allocates.
size_t free_bytes(int device);
void* alloc(int device, size_t bytes);
void free(int device, void* ptr);
void copy(void* dst, bool dst_is_device, const void* src, bool src_is_device, size_t bytes);
void memset_zero(void* dst, size_t bytes);
void memset_zero_async(void* dst, size_t bytes, void* stream);
// Ordered on `stream`; returns at once (pinned or device memory) or after staging (pageable).
void copy_async(
    void* dst, bool dst_is_device, const void* src, bool src_is_device, size_t bytes, void* stream);
// Pitched copy of `rows` rows of `row_bytes` (cudaMemcpy2DAsync), ordered on `stream`.
void copy_2d_async(void* dst,
                   size_t dst_pitch,
                   bool dst_is_device,
                   const void* src,
                   size_t src_pitch,
                   bool src_is_device,
                   size_t row_bytes,
                   size_t rows,
                   void* stream);
// Page-locked host memory (cudaMallocHost / cudaFreeHost).
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* ptr);
// Page-locked host memory mapped into every device's address space (cudaHostAlloc with
// cudaHostAllocMapped | cudaHostAllocPortable): returns the host pointer and sets *device_ptr
// to the address kernels use (cudaHostGetDevicePointer). Freed by host_free_pinned.
void* host_alloc_mapped(size_t bytes, void** device_ptr);

// Streams and events as opaque handles.
void* stream_create(int device);
void stream_destroy(void* stream);
void stream_synchronize(void* stream);
void* event_create(int device, bool timing);  // timing: usable by event_elapsed_ms
void event_destroy(void* event);
void event_record(void* event, void* stream);
void stream_wait_event(void* stream, void* event);
void event_synchronize(void* event);
bool event_query(void* event);  // true when the work before the record has completed
float event_elapsed_ms(void* start, void* end);  // both timing events, completed

}  // namespace shardrec::cuda
