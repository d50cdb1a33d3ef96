// Raw byte allocation per device. CPU: 64-byte aligned (cache line and AVX-512 loads). CUDA: the
// stream-ordered pool (engine/core/cuda/). Both are counted per device type, so benchmarks can
// report peak memory and tests can assert the training loop allocates nothing per step after
// warm-up, on the host and on the GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/core/device.h"

namespace shardrec {

constexpr size_t kCpuAlignment = 64;

void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* ptr, size_t bytes);

// Page-locked host memory for host-to-device staging (CUDA builds only), counted as the host's.
void* pinned_alloc(size_t bytes);
void pinned_free(void* ptr, size_t bytes);

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

}  // namespace shardrec
