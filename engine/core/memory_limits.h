// How much memory this process may still allocate: the tightest of what the machine has free
// (MemAvailable), what its cgroup still allows (memory.max on v2, memory.limit_in_bytes on v1,
// over every ancestor) and what its address-space limit (RLIMIT_AS, `ulimit -v`) leaves. The
// trainer and `shardrec validate` compare a plan's bytes with it before allocating.
#pragma once

#include <cstdint>
#include <string>

namespace shardrec {

// The raw numbers, in bytes; -1 where unknown or unlimited.
struct MemoryLimits {
    int64_t mem_available = -1;        // /proc/meminfo MemAvailable
    int64_t cgroup_limit = -1;         // the cgroup level with the least headroom: its limit
    int64_t cgroup_usage = -1;         //   and its usage, less reclaimable page cache
    std::string cgroup_file;           //   the limit's file, for messages
    int64_t address_space_limit = -1;  // RLIMIT_AS (soft)
    int64_t address_space_used = -1;   // VmSize of /proc/self/status
};

// What the process may still allocate and which limit decides it.
struct AvailableMemory {
    int64_t bytes = -1;    // -1: nothing is known (no /proc): no check can be made
    std::string bound_by;  // "MemAvailable", "the cgroup limit (FILE)", "RLIMIT_AS", ...
};

// The tightest headroom of the limits: min(MemAvailable, cgroup limit - usage, RLIMIT_AS -
// VmSize), never below 0. Pure, for tests.
AvailableMemory available_memory(const MemoryLimits& limits);

// Reads /proc/meminfo, /proc/self/cgroup, /proc/self/mountinfo, the cgroup files and RLIMIT_AS.
MemoryLimits read_memory_limits();

// available_memory(read_memory_limits()).
AvailableMemory available_host_memory();

// "1.5 GiB", "12.0 MiB", "512 B": for messages.
std::string format_bytes(double bytes);

}  // namespace shardrec
