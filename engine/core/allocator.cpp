#include "engine/core/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/core/error.h"
#include "engine/core/memory_limits.h"

namespace shardrec {
namespace {

// The counters of one device type.
struct Counters {
    std::atomic<int64_t> current{0};
    std::atomic<int64_t> peak{0};
    std::atomic<int64_t> allocs{0};

    void add(size_t bytes) {
        const int64_t now =
            current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
        int64_t p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
        allocs.fetch_add(1);
    }

    void remove(size_t bytes) { current.fetch_sub(static_cast<int64_t>(bytes)); }
};

Counters g_counters[2];  // indexed by DeviceType

Counters& counters(DeviceType type) {
    return g_counters[static_cast<size_t>(type)];
}

constexpr size_t kHugePageMinBytes = size_t{32} << 20;

thread_local std::string t_label;
thread_local int t_host_mapped = 0;  // depth of with_host_mapped_allocations scopes

// " for LABEL" or "" for the messages.
std::string label_suffix() {
    return t_label.empty() ? std::string() : " for " + t_label;
}

}  // namespace

void with_allocation_label(const std::string& what, const std::function<void()>& fn) {
    std::string outer = std::exchange(t_label, what);
    try {
        fn();
    } catch (const std::bad_alloc&) {
        t_label = std::move(outer);
        throw Error(fmt::format("{}: out of host memory allocating {} (std::bad_alloc)",
                                error_context(), what));
    } catch (...) {
        t_label = std::move(outer);
        throw;
    }
    t_label = std::move(outer);
}

const std::string& allocation_label() {
    return t_label;
}

void* device_alloc(Device device, size_t bytes) {
    if (bytes == 0)
        return nullptr;
    if (device.is_cuda()) {
        void* p = nullptr;
        try {
            p = cuda::alloc(device.index, bytes);
        } catch (const Error& e) {
            throw Error(fmt::format("{} (allocating {} on cuda:{}{})", e.what(),
                                    format_bytes(static_cast<double>(bytes)), device.index,
                                    label_suffix()));
        }
        counters(DeviceType::kCuda).add(bytes);
        return p;
    }
    return host_alloc(bytes, kHugePageMinBytes);
}

void* host_alloc(size_t bytes, size_t huge_from) {
    if (bytes == 0)
        return nullptr;
    // Large buffers (embedding tables) start on a 2 MiB boundary and ask for transparent huge
    // pages: random row gathers then rarely miss the TLB (about 1.5x on a 512 MiB table lookup).
    constexpr size_t kHugePage = size_t{2} << 20;
    const bool huge = bytes >= huge_from;
    const size_t align = huge ? kHugePage : kCpuAlignment;
    const size_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    SR_CHECK(p != nullptr, "out of host memory allocating {} ({} bytes){}",
             format_bytes(static_cast<double>(bytes)), bytes, label_suffix());
#ifdef MADV_HUGEPAGE
    if (huge)
        (void)madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
    counters(DeviceType::kCpu).add(bytes);
    return p;
}

namespace {

constexpr size_t kTablePage = size_t{2} << 20;
constexpr size_t kSharedTableMin = size_t{64} << 10, kSharedTableMax = size_t{1} << 20;

// 2 MiB huge pages cut into blocks of one size each (table_alloc): a page is taken when no page of
// that size has a free block and given back when its last block is freed, so the pages held
// follow the tables alive, whatever the order they grow and shrink in.
class SharedTablePages {
public:
    void* take(size_t bytes) {
        const size_t block = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
        const std::lock_guard<std::mutex> lock(mutex_);
        std::set<uintptr_t>& open = open_[block];
        if (open.empty()) {
            const auto base = reinterpret_cast<uintptr_t>(host_alloc(kTablePage, kTablePage));
            Page& page = pages_[base];
            page.block = block;
            for (size_t at = kTablePage / block * block; at >= block; at -= block)
                page.free.push_back(base + at - block);
            open.insert(base);
        }
        // The fullest page with room: the emptier ones then drain, and go back, first.
        const uintptr_t base = *std::min_element(open.begin(), open.end(), [&](auto a, auto b) {
            return pages_.at(a).free.size() < pages_.at(b).free.size();
        });
        Page& page = pages_.at(base);
        const uintptr_t p = page.free.back();
        page.free.pop_back();
        if (page.free.empty())
            open.erase(base);
        return reinterpret_cast<void*>(p);
    }

    void give(void* ptr) {
        const auto p = reinterpret_cast<uintptr_t>(ptr);
        const uintptr_t base = p & ~(kTablePage - 1);  // host_alloc aligns a page to its size
        const std::lock_guard<std::mutex> lock(mutex_);
        Page& page = pages_.at(base);
        page.free.push_back(p);
        if (page.free.size() < kTablePage / page.block) {
            open_[page.block].insert(base);
            return;
        }
        open_[page.block].erase(base);
        pages_.erase(base);
        device_free(Device::cpu(), reinterpret_cast<void*>(base), kTablePage);
    }

private:
    struct Page {
        size_t block = 0;
        std::vector<uintptr_t> free;  // its blocks not in use
    };

    std::mutex mutex_;
    std::map<uintptr_t, Page> pages_;             // by base address
    std::map<size_t, std::set<uintptr_t>> open_;  // block size -> pages with a free block
};

SharedTablePages& shared_table_pages() {
    // Never destroyed: a table held by a static object may be freed after any static's end.
    static auto* pages = new SharedTablePages;
    return *pages;
}

}  // namespace

void* table_alloc(size_t bytes) {
    if (bytes >= kSharedTableMin && bytes < kSharedTableMax)
        return shared_table_pages().take(bytes);
    return host_alloc(bytes, kSharedTableMax);
}

void table_free(void* ptr, size_t bytes) {
    if (ptr != nullptr && bytes >= kSharedTableMin && bytes < kSharedTableMax)
        shared_table_pages().give(ptr);
    else
        device_free(Device::cpu(), ptr, bytes);
}

void device_free(Device device, void* ptr, size_t bytes) {
    if (ptr == nullptr)
        return;
    if (device.is_cuda())
        cuda::free(device.index, ptr);
    else
        std::free(ptr);
    counters(device.type).remove(bytes);
}

void* pinned_alloc(size_t bytes) {
    void* p = cuda::host_alloc_pinned(bytes);
    counters(DeviceType::kCpu).add(bytes);
    return p;
}

void pinned_free(void* ptr, size_t bytes) {
    if (ptr == nullptr)
        return;
    cuda::host_free_pinned(ptr);
    counters(DeviceType::kCpu).remove(bytes);
}

void* mapped_host_alloc(size_t bytes, void** device_ptr) {
    void* p = nullptr;
    try {
        p = cuda::host_alloc_mapped(std::max<size_t>(bytes, 1), device_ptr);
    } catch (const Error& e) {
        throw Error(fmt::format("{} (allocating {} of mapped host memory{})", e.what(),
                                format_bytes(static_cast<double>(bytes)), label_suffix()));
    }
    counters(DeviceType::kCpu).add(bytes);
    return p;
}

void mapped_host_free(void* host_ptr, size_t bytes) {
    if (host_ptr == nullptr)
        return;
    cuda::host_free_pinned(host_ptr);
    counters(DeviceType::kCpu).remove(bytes);
}

void with_host_mapped_allocations(const std::function<void()>& fn) {
    ++t_host_mapped;
    try {
        fn();
    } catch (...) {
        --t_host_mapped;
        throw;
    }
    --t_host_mapped;
}

bool host_mapped_allocations() {
    return t_host_mapped > 0;
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
    if (bytes == 0)
        return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
        std::memcpy(dst, src, bytes);
        return;
    }
    cuda::copy(dst, dst_device.is_cuda(), src, src_device.is_cuda(), bytes);
}

void device_memset_zero(void* dst, Device device, size_t bytes) {
    if (bytes == 0)
        return;
    if (device.is_cpu()) {
        std::memset(dst, 0, bytes);
        return;
    }
    cuda::memset_zero(dst, bytes);
}

namespace {

// The whole file, or "" when it cannot be opened.
std::string read_text(const char* path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return in ? text.str() : std::string();
}

}  // namespace

std::string parse_thp_mode(const std::string& enabled) {
    const size_t open = enabled.find('[');
    const size_t close = enabled.find(']', open);
    return open == std::string::npos || close == std::string::npos
               ? std::string()
               : enabled.substr(open + 1, close - open - 1);
}

int64_t parse_anon_huge_bytes(const std::string& smaps) {
    static const std::string key = "AnonHugePages:";
    int64_t kib = -1;
    std::istringstream lines(smaps);
    for (std::string line; std::getline(lines, line);) {
        if (line.compare(0, key.size(), key) == 0) {
            kib = std::max<int64_t>(kib, 0) + std::strtoll(line.c_str() + key.size(), nullptr, 10);
        }
    }
    return kib < 0 ? -1 : kib * 1024;
}

HugePageUsage huge_page_usage() {
    HugePageUsage u;
    u.mode = parse_thp_mode(read_text("/sys/kernel/mm/transparent_hugepage/enabled"));
    // smaps_rollup (Linux 4.14) is one summary; smaps lists every mapping, far longer.
    for (const char* path : {"/proc/self/smaps_rollup", "/proc/self/smaps"}) {
        u.anon_huge_bytes = parse_anon_huge_bytes(read_text(path));
        if (u.anon_huge_bytes >= 0) {
            u.source = path;
            break;
        }
    }
    return u;
}

std::string describe_huge_pages(const HugePageUsage& u, int64_t table_bytes) {
    if (u.mode.empty() || u.anon_huge_bytes < 0) {
        return fmt::format("huge pages: not available ({})",
                           u.mode.empty() ? "no /sys/kernel/mm/transparent_hugepage/enabled"
                                          : "no AnonHugePages in /proc/self/smaps_rollup or smaps");
    }
    return fmt::format(
        "huge pages: {}, {} of the process on 2 MiB pages for {} of tables (AnonHugePages, {})",
        u.mode, format_bytes(static_cast<double>(u.anon_huge_bytes)),
        format_bytes(static_cast<double>(table_bytes)), u.source);
}

AllocStats alloc_stats(DeviceType type) {
    const Counters& c = counters(type);
    return AllocStats{c.current.load(), c.peak.load(), c.allocs.load()};
}

}  // namespace shardrec
