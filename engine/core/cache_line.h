// Data that CPU threads write at once, each its own: on cache lines of its own. Two threads that
// write neighbouring objects (a vector's end pointer, a table's size, a counter) pass their shared
// line back and forth at every write, which can halve both threads' speed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardrec {

constexpr size_t kCacheLine = 64;

// T on whole cache lines of its own, e.g. std::array<OwnLine<std::vector<int>>, N> for the N
// threads' lists.
template <class T>
struct alignas(kCacheLine) OwnLine : T {
    using T::T;
};

// Elements a thread's slice of counters takes in an array of int64 slices that share no line:
// n rounded up to whole lines, plus a line (the array itself need not start on a line).
constexpr size_t own_lines_stride(size_t n) {
    constexpr size_t per_line = kCacheLine / sizeof(int64_t);
    return (n + per_line - 1) / per_line * per_line + per_line;
}

}  // namespace shardrec
