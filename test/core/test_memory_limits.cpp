// The memory a process may still allocate: the pure minimum over the limits, the limits read from
// the real /proc and cgroup files and RLIMIT_AS, and allocations that fail naming what they were
// for.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/memory_limits.h"
#include "test/support/compare.h"

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

// "Key:   N kB" of a /proc file, in bytes, read here independently of the code under test.
int64_t proc_kb(const std::string& file, const std::string& key) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key + ":", 0) == 0) {
            std::istringstream words(line.substr(key.size() + 1));
            int64_t kb = 0;
            words >> kb;
            return kb * 1024;
        }
    }
    return -1;
}

}  // namespace

TEST_CASE("available_memory: the tightest headroom wins and says which limit it is", "[memory]") {
    MemoryLimits l;
    CHECK(available_memory(l).bytes == -1);  // nothing known: no check

    l.mem_available = 20 * kGiB;
    CHECK(available_memory(l).bytes == 20 * kGiB);
    CHECK_THAT(available_memory(l).bound_by, Contains("MemAvailable"));

    // A cgroup of 8 GiB with 3 GiB in use leaves 5 GiB.
    l.cgroup_limit = 8 * kGiB;
    l.cgroup_usage = 3 * kGiB;
    l.cgroup_file = "/sys/fs/cgroup/job/memory.max";
    CHECK(available_memory(l).bytes == 5 * kGiB);
    CHECK_THAT(available_memory(l).bound_by, Contains("/sys/fs/cgroup/job/memory.max") &&
                                                 Contains("8.0 GiB") && Contains("3.0 GiB"));

    // ulimit -v 4 GiB with 1.5 GiB of address space mapped leaves 2.5 GiB.
    l.address_space_limit = 4 * kGiB;
    l.address_space_used = 3 * kGiB / 2;
    CHECK(available_memory(l).bytes == 5 * kGiB / 2);
    CHECK_THAT(available_memory(l).bound_by, Contains("RLIMIT_AS") && Contains("4.0 GiB"));

    // A limit already exceeded leaves nothing, never a negative amount.
    l.cgroup_usage = 9 * kGiB;
    CHECK(available_memory(l).bytes == 0);
    CHECK_THAT(available_memory(l).bound_by, Contains("cgroup"));
}

TEST_CASE("read_memory_limits: MemAvailable, VmSize and RLIMIT_AS of this process", "[memory]") {
    const MemoryLimits l = read_memory_limits();
    const int64_t mem_available = proc_kb("/proc/meminfo", "MemAvailable");
    REQUIRE(mem_available > 0);
    // Other processes move it between the two reads; a wrong unit or field would be far off.
    CHECK(std::abs(l.mem_available - mem_available) < 512 * kMiB);
    CHECK(l.mem_available <= proc_kb("/proc/meminfo", "MemTotal"));
    const int64_t vm_size = proc_kb("/proc/self/status", "VmSize");
    CHECK(std::abs(l.address_space_used - vm_size) < 64 * kMiB);

    rlimit as{};
    REQUIRE(getrlimit(RLIMIT_AS, &as) == 0);
    CHECK(l.address_space_limit ==
          (as.rlim_cur == RLIM_INFINITY ? -1 : static_cast<int64_t>(as.rlim_cur)));
    if (l.cgroup_limit >= 0) {
        // The limit was read from that file, and the usage is below it or close.
        std::ifstream in(l.cgroup_file);
        int64_t limit = 0;
        REQUIRE(in >> limit);
        CHECK(limit == l.cgroup_limit);
        CHECK(l.cgroup_usage >= 0);
    }
    CHECK(available_memory(l).bytes <= l.mem_available);
    CHECK(available_host_memory().bytes > 0);
}

TEST_CASE("read_memory_limits: a lowered RLIMIT_AS bounds what is available", "[memory]") {
    rlimit saved{};
    REQUIRE(getrlimit(RLIMIT_AS, &saved) == 0);
    const int64_t used = proc_kb("/proc/self/status", "VmSize");
    rlimit lowered = saved;
    lowered.rlim_cur = static_cast<rlim_t>(used + 256 * kMiB);
    REQUIRE(setrlimit(RLIMIT_AS, &lowered) == 0);
    const MemoryLimits l = read_memory_limits();
    const AvailableMemory a = available_memory(l);
    REQUIRE(setrlimit(RLIMIT_AS, &saved) == 0);  // before any CHECK can throw
    CHECK(l.address_space_limit == used + 256 * kMiB);
    CHECK(a.bytes > 128 * kMiB);
    CHECK(a.bytes <= 256 * kMiB);
    CHECK_THAT(a.bound_by, Contains("RLIMIT_AS"));
}

TEST_CASE("an allocation that fails names what it was for", "[memory][own_memory]") {
    const std::string label = "the rows of table 'huge' [1000000000000000, 1024]";
    // 1 EiB: no machine maps that, so the allocator's own out-of-memory error is the one raised.
    try {
        with_allocation_label(label, [] { (void)device_alloc(Device::cpu(), size_t{1} << 60); });
        FAIL("no error");
    } catch (const Error& e) {
        CHECK_THAT(e.what(),
                   Contains("out of host memory allocating 1.0 EiB") && Contains("for " + label));
    }
    CHECK(allocation_label().empty());

    // A std::bad_alloc from a container inside becomes an Error naming the label too.
    try {
        with_allocation_label(label, [] {
            std::vector<char> v;
            v.reserve(size_t{1} << 60);
        });
        FAIL("no error");
    } catch (const Error& e) {
        CHECK_THAT(e.what(), Contains(label) && Contains("std::bad_alloc"));
    }

    // Nested labels: the innermost is named, the outer comes back afterwards.
    with_allocation_label("outer", [] {
        with_allocation_label("inner", [] { CHECK(allocation_label() == "inner"); });
        CHECK(allocation_label() == "outer");
    });
}

TEST_CASE("format_bytes: binary units for messages", "[memory]") {
    CHECK(format_bytes(512) == "512 B");
    CHECK(format_bytes(1536) == "1.5 KiB");
    CHECK(format_bytes(3.0 * kGiB) == "3.0 GiB");
    CHECK(format_bytes(5.12e12) == "4.7 TiB");
}

TEST_CASE("huge pages: the THP mode and AnonHugePages are parsed and described", "[memory]") {
    CHECK(parse_thp_mode("always [madvise] never\n") == "madvise");
    CHECK(parse_thp_mode("[always] madvise never") == "always");
    CHECK(parse_thp_mode("") == "");
    // smaps lists a mapping per block: the lines are summed.
    CHECK(parse_anon_huge_bytes("Rss: 8 kB\nAnonHugePages:      2048 kB\nSwap: 0 kB\n"
                                "AnonHugePages:  4096 kB\n") == 6144 * 1024);
    CHECK(parse_anon_huge_bytes("Rss: 8 kB\n") == -1);
    HugePageUsage u{"madvise", int64_t{1932735283}, "/proc/self/smaps_rollup"};
    CHECK(describe_huge_pages(u, int64_t{2} << 30) ==
          "huge pages: madvise, 1.8 GiB of the process on 2 MiB pages for 2.0 GiB of tables "
          "(AnonHugePages, /proc/self/smaps_rollup)");
    CHECK_THAT(describe_huge_pages(HugePageUsage{"never", 0, "/proc/self/smaps"}, 1258291),
               Contains("never, 0 B of the process on 2 MiB pages for 1.2 MiB of tables"));
    CHECK_THAT(describe_huge_pages(HugePageUsage{}, 0), Contains("not available"));
}

TEST_CASE("huge pages: a touched 64 MiB buffer of device_alloc shows in AnonHugePages",
          "[memory]") {
    const HugePageUsage before = huge_page_usage();
    if (before.mode.empty() || before.mode == "never" || before.anon_huge_bytes < 0) {
        test::not_run("transparent huge pages are not available here (" + before.mode + ")");
        return;
    }
    constexpr size_t kBytes = size_t{64} << 20;
    void* p = device_alloc(Device::cpu(), kBytes);
    std::memset(p, 1, kBytes);
    const HugePageUsage after = huge_page_usage();
    device_free(Device::cpu(), p, kBytes);
    CHECK(after.source == "/proc/self/smaps_rollup");
    // The kernel may lack free 2 MiB blocks; with 64 MiB asked for, some must come.
    CHECK(after.anon_huge_bytes > before.anon_huge_bytes);
}

TEST_CASE(
    "table_alloc: tables of 64 KiB to 1 MiB share 2 MiB pages, each given back with its "
    "last block",
    "[memory]") {
    constexpr size_t kPage = size_t{2} << 20, kBlock = 16384 * 24;  // a window of 16384 cells
    const AllocStats before = alloc_stats(DeviceType::kCpu);
    std::vector<void*> blocks;
    for (int i = 0; i < 6; ++i) {  // 5 blocks a page, so two pages
        blocks.push_back(table_alloc(kBlock));
        std::memset(blocks.back(), i + 1, kBlock);
    }
    const auto at = [&](size_t i) { return reinterpret_cast<uintptr_t>(blocks[i]); };
    for (size_t i = 0; i < blocks.size(); ++i) {
        CHECK(at(i) % kCpuAlignment == 0);
        for (size_t j = 0; j < i; ++j)
            CHECK((at(i) >= at(j) + kBlock || at(j) >= at(i) + kBlock));  // no overlap
    }
    for (size_t i = 1; i < 5; ++i)
        CHECK(at(i) / kPage == at(0) / kPage);  // the first page's five blocks
    CHECK(at(5) / kPage != at(0) / kPage);
    for (size_t i = 0; i < blocks.size(); ++i)  // nothing wrote over another block
        CHECK(static_cast<unsigned char*>(blocks[i])[kBlock - 1] == i + 1);
    const AllocStats two_pages = alloc_stats(DeviceType::kCpu);
    CHECK(two_pages.current_bytes - before.current_bytes == int64_t{2} * kPage);
    CHECK(two_pages.num_allocs - before.num_allocs == 2);
    // A freed block is taken again before a new page; the second page goes with its block.
    table_free(blocks[2], kBlock);
    blocks[2] = table_alloc(kBlock);
    CHECK(alloc_stats(DeviceType::kCpu).num_allocs == two_pages.num_allocs);
    table_free(blocks[5], kBlock);
    CHECK(alloc_stats(DeviceType::kCpu).current_bytes - before.current_bytes == int64_t{kPage});
    for (size_t i = 0; i < 5; ++i)
        table_free(blocks[i], kBlock);
    CHECK(alloc_stats(DeviceType::kCpu).current_bytes == before.current_bytes);
    // 1 MiB and more: a buffer of its own; under 64 KiB: plain.
    for (const size_t bytes : {size_t{1} << 20, size_t{32} << 10}) {
        void* p = table_alloc(bytes);
        CHECK(alloc_stats(DeviceType::kCpu).current_bytes - before.current_bytes ==
              static_cast<int64_t>(bytes));
        table_free(p, bytes);
    }
    CHECK(alloc_stats(DeviceType::kCpu).current_bytes == before.current_bytes);
}
