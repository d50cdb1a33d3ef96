// Raw byte allocation per device. CPU: 64-byte aligned (cache line and AVX-512 loads). CUDA: the
// stream-ordered pool (engine/core/cuda/). Both are counted per device type, so benchmarks can
// report peak memory and tests can assert the training loop allocates nothing per step after
// warm-up, on the host and on the GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/core/device.h"

namespace shardrec {

constexpr size_t kCpuAlignment = 64;

// Throws Error when the memory is not there, naming the bytes and the allocation_label().
void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* ptr, size_t bytes);

// Page-locked host memory for host-to-device staging (CUDA builds only), counted as the host's.
void* pinned_alloc(size_t bytes);
void pinned_free(void* ptr, size_t bytes);

// Page-locked host memory mapped into the GPUs' address space (fused_uvm rows; CUDA builds
// only), counted as the host's: returns the host pointer, *device_ptr the address kernels use.
void* mapped_host_alloc(size_t bytes, void** device_ptr);
void mapped_host_free(void* host_ptr, size_t bytes);

// Runs fn with this thread's CUDA tensors (Tensor::empty, zeros on a CUDA device) allocated by
// mapped_host_alloc: they stay CUDA tensors whose data pointer is the device address of host
// memory, so the same kernels read and update them in place over the host link (TorchRec's
// FUSED_UVM), and they are freed by mapped_host_free. Scopes nest.
void with_host_mapped_allocations(const std::function<void()>& fn);
bool host_mapped_allocations();  // inside such a scope on this thread

// Copies bytes between any two devices (synchronously with respect to the host).
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void device_memset_zero(void* dst, Device device, size_t bytes);

struct AllocStats {
    int64_t current_bytes = 0;
    int64_t peak_bytes = 0;
    int64_t num_allocs = 0;  // allocations ever made; a step that allocates moves this
};

// The host's allocations, or those of every CUDA device of this process together (one per rank).
AllocStats alloc_stats(DeviceType type);

// Runs fn with `what` ("table 'big' [1000000, 128] with its optimizer state") as this thread's
// allocation label: a device_alloc that fails inside names it, and a std::bad_alloc thrown
// inside becomes an Error naming it. Labels nest; the innermost is named.
void with_allocation_label(const std::string& what, const std::function<void()>& fn);

// The innermost label of this thread, "" outside with_allocation_label.
const std::string& allocation_label();

}  // namespace shardrec
