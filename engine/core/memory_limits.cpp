#include "engine/core/memory_limits.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace shardrec {
namespace {

// A v1 "no limit" is LLONG_MAX rounded down to a page; anything this large means none.
constexpr int64_t kNoLimit = int64_t{1} << 62;

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    if (!in)
        return "";
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A file holding one number ("max" or a missing file: -1).
int64_t read_number(const std::string& path) {
    std::ifstream in(path);
    std::string word;
    if (!(in >> word) || word == "max")
        return -1;
    try {
        const long long v = std::stoll(word);
        return v >= kNoLimit ? -1 : static_cast<int64_t>(v);
    } catch (const std::exception&) {
        return -1;
    }
}

// "Key:  123 kB" (meminfo, status) or "key 123" (memory.stat): the number after `key`, in bytes
// when the line says kB; -1 when absent.
int64_t find_value(const std::string& text, const std::string& key) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::string name, unit;
        long long value = 0;
        if (!(words >> name >> value))
            continue;
        if (!name.empty() && name.back() == ':')
            name.pop_back();
        if (name != key)
            continue;
        words >> unit;
        return unit == "kB" ? static_cast<int64_t>(value) * 1024 : static_cast<int64_t>(value);
    }
    return -1;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string part;
    std::istringstream in(s);
    while (std::getline(in, part, sep))
        out.push_back(part);
    return out;
}

// The memory cgroup directory of this process and whether it is v2; empty when there is none.
// v1's memory controller wins on hybrid hosts (their v2 hierarchy carries no memory controller).
struct CgroupDir {
    std::string dir;
    std::string mount;
    bool v2 = false;
};

CgroupDir find_cgroup_dir() {
    std::string v1_path, v2_path;
    bool has_v1 = false, has_v2 = false;
    std::istringstream cgroups(read_text("/proc/self/cgroup"));
    std::string line;
    while (std::getline(cgroups, line)) {
        const size_t a = line.find(':');
        const size_t b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos)
            continue;
        const std::string controllers = line.substr(a + 1, b - a - 1);
        const std::string path = line.substr(b + 1);
        if (controllers.empty()) {
            v2_path = path;
            has_v2 = true;
        }
        for (const std::string& c : split(controllers, ',')) {
            if (c == "memory") {
                v1_path = path;
                has_v1 = true;
            }
        }
    }
    CgroupDir found;
    std::istringstream mounts(read_text("/proc/self/mountinfo"));
    while (std::getline(mounts, line)) {
        const size_t dash = line.find(" - ");
        if (dash == std::string::npos)
            continue;
        const std::vector<std::string> left = split(line.substr(0, dash), ' ');
        std::istringstream right(line.substr(dash + 3));
        std::string fstype, source, options;
        right >> fstype >> source >> options;
        if (left.size() < 5)
            continue;
        const std::string& root = left[3];
        const std::string& point = left[4];
        const std::vector<std::string> opts = split(options, ',');
        const bool v1_memory =
            fstype == "cgroup" && std::find(opts.begin(), opts.end(), "memory") != opts.end();
        const bool v2 = fstype == "cgroup2";
        if (!(v1_memory && has_v1) && !(v2 && has_v2 && found.dir.empty()))
            continue;
        std::string path = v1_memory ? v1_path : v2_path;
        // Inside a cgroup namespace the mount's root is a prefix of the path, or the path is "/".
        if (root != "/" && path.compare(0, root.size(), root) == 0)
            path = path.substr(root.size());
        found.mount = point;
        found.dir = point + (path == "/" ? "" : path);
        found.v2 = v2;
        if (v1_memory)
            break;
    }
    return found;
}

// The level from the process's cgroup up to the mount with the least headroom.
void read_cgroup(MemoryLimits& limits) {
    const CgroupDir cg = find_cgroup_dir();
    if (cg.dir.empty())
        return;
    int64_t best = -1;
    for (std::string dir = cg.dir; dir.size() >= cg.mount.size();) {
        const std::string limit_file = dir + (cg.v2 ? "/memory.max" : "/memory.limit_in_bytes");
        const int64_t limit = read_number(limit_file);
        if (limit >= 0) {
            int64_t usage =
                read_number(dir + (cg.v2 ? "/memory.current" : "/memory.usage_in_bytes"));
            // Page cache is counted in the usage but given back under pressure.
            const std::string stat = read_text(dir + "/memory.stat");
            const int64_t inactive =
                find_value(stat, cg.v2 ? "inactive_file" : "total_inactive_file");
            usage = std::max<int64_t>(0, usage - std::max<int64_t>(0, inactive));
            if (best < 0 || limit - usage < best) {
                best = limit - usage;
                limits.cgroup_limit = limit;
                limits.cgroup_usage = usage;
                limits.cgroup_file = limit_file;
            }
        }
        const size_t slash = dir.rfind('/');
        if (dir == cg.mount || slash == std::string::npos)
            break;
        dir = dir.substr(0, slash);
    }
}

}  // namespace

AvailableMemory available_memory(const MemoryLimits& l) {
    AvailableMemory a;
    const auto consider = [&a](int64_t headroom, std::string what) {
        headroom = std::max<int64_t>(0, headroom);
        if (a.bytes < 0 || headroom < a.bytes) {
            a.bytes = headroom;
            a.bound_by = std::move(what);
        }
    };
    if (l.mem_available >= 0)
        consider(l.mem_available, "MemAvailable in /proc/meminfo");
    if (l.cgroup_limit >= 0)
        consider(
            l.cgroup_limit - std::max<int64_t>(0, l.cgroup_usage),
            fmt::format("the cgroup limit {} of {}, {} in use", l.cgroup_file,
                        format_bytes(static_cast<double>(l.cgroup_limit)),
                        format_bytes(static_cast<double>(std::max<int64_t>(0, l.cgroup_usage)))));
    if (l.address_space_limit >= 0)
        consider(l.address_space_limit - std::max<int64_t>(0, l.address_space_used),
                 fmt::format("RLIMIT_AS (ulimit -v) of {}, {} of address space in use",
                             format_bytes(static_cast<double>(l.address_space_limit)),
                             format_bytes(
                                 static_cast<double>(std::max<int64_t>(0, l.address_space_used)))));
    return a;
}

MemoryLimits read_memory_limits() {
    MemoryLimits l;
    l.mem_available = find_value(read_text("/proc/meminfo"), "MemAvailable");
    read_cgroup(l);
    rlimit as{};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
        l.address_space_limit = static_cast<int64_t>(as.rlim_cur);
    l.address_space_used = find_value(read_text("/proc/self/status"), "VmSize");
    return l;
}

AvailableMemory available_host_memory() {
    return available_memory(read_memory_limits());
}

std::string format_bytes(double bytes) {
    constexpr double kKiB = 1024.0;
    const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    size_t u = 0;
    while (bytes >= kKiB && u + 1 < std::size(units)) {
        bytes /= kKiB;
        ++u;
    }
    return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace shardrec
