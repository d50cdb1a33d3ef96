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

// Host memory (what device_alloc gives on the CPU) on transparent huge pages from huge_from bytes.
void* host_alloc(size_t bytes, size_t huge_from);

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

// Memory for a hash table probed at random, on transparent huge pages so that a probe is one
// cache miss and rarely a page walk: from 1 MiB a buffer of its own, from 64 KiB a block of a
// 2 MiB page shared with tables of the same size (a table of several managed-collision buckets
// has 32 a bucket, most of them under 1 MiB), smaller ones plain. Counted in the host's
// allocation stats (a shared page when it is taken and when its last block is freed).
void* table_alloc(size_t bytes);
void table_free(void* ptr, size_t bytes);

// std::vector's allocator for those tables (managed collision's slot maps and windows).
template <class T>
struct HostAllocator {
    using value_type = T;
    HostAllocator() = default;

    template <class U>
    HostAllocator(const HostAllocator<U>&) {}

    T* allocate(size_t n) { return static_cast<T*>(table_alloc(n * sizeof(T))); }

    void deallocate(T* p, size_t n) { table_free(p, n * sizeof(T)); }

    template <class U>
    bool operator==(const HostAllocator<U>&) const {
        return true;
    }

    template <class U>
    bool operator!=(const HostAllocator<U>&) const {
        return false;
    }
};

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

// How much of this process sits on transparent huge pages (device_alloc asks for them for
// buffers of 32 MiB and more: the tables, their optimizer state, large workspaces).
struct HugePageUsage {
    std::string mode;              // "always", "madvise", "never"; "" when THP is not there
    int64_t anon_huge_bytes = -1;  // AnonHugePages of the process; -1 when /proc does not say
    std::string source;            // the file it was read from
};

// Reads /sys/kernel/mm/transparent_hugepage/enabled and AnonHugePages from
// /proc/self/smaps_rollup, or the sum over /proc/self/smaps where the rollup is missing.
HugePageUsage huge_page_usage();

// The selected word of a THP "enabled" file ("always [madvise] never" -> "madvise").
std::string parse_thp_mode(const std::string& enabled);

// The sum of the "AnonHugePages: N kB" lines of an smaps or smaps_rollup text, in bytes; -1
// when there is none.
int64_t parse_anon_huge_bytes(const std::string& smaps);

// "huge pages: madvise, 1.9 GiB of the process on 2 MiB pages for 2.0 GiB of tables
// (AnonHugePages, /proc/self/smaps_rollup)", or "huge pages: not available (...)".
std::string describe_huge_pages(const HugePageUsage& usage, int64_t table_bytes);

}  // namespace shardrec
