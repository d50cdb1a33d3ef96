// Where a training step's time goes (`shardrec bench --profile`): a profile::Range records a
// timing event on its stream where it opens and where it closes, and collect() adds up the
// elapsed times per region once the device has done the work. Ranges nest: a region's name is
// the path of the ranges open around it on the calling thread ("backward/sparse_arch"). Off
// (the default), a Range costs one branch. On, each costs two event records (a few
// microseconds of host time) and the regions of a stream are timed in that stream's order, so
// work overlapped on other streams is not in them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/stream.h"

namespace shardrec::profile {

// Starts recording ranges from this thread on `device`'s streams; a no-op where already on.
void enable(Device device);
bool enabled();

class Range {
public:
    Range(const char* name, Stream& stream);
    ~Range();
    Range(const Range&) = delete;
    Range& operator=(const Range&) = delete;

private:
    Stream* stream_ = nullptr;  // nullptr: profiling is off
    int64_t pair_ = -1;
};

// fn() inside a Range: `const Tensor& y = profile::timed("over_arch", s, [&]() -> const
// Tensor& { return mlp.forward(x, s); });`
template <typename Fn>
decltype(auto) timed(const char* name, Stream& stream, Fn&& fn) {
    Range r(name, stream);
    return fn();
}

struct RegionTime {
    std::string name;  // "forward/dense_arch"
    int depth = 0;     // number of enclosing regions
    double total_ms = 0;
    int64_t count = 0;  // ranges closed under this name
};

// Waits for the recorded ranges and returns the totals since the last reset(), in the order
// the regions first opened.
std::vector<RegionTime> collect();
void reset();

}  // namespace shardrec::profile
