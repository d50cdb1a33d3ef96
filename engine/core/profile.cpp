#include "engine/core/profile.h"

#include <memory>
#include <unordered_map>

#include "engine/core/error.h"

namespace shardrec::profile {
namespace {

struct Pair {
    std::unique_ptr<Event> begin, end;
    size_t region = 0;
};

// The ranges open on the profiled thread: the profiler serves the training thread only.
struct State {
    bool on = false;
    Device device;
    std::vector<Pair> pairs;  // recorded, not yet collected, then reused
    size_t used = 0;
    std::vector<size_t> open;  // region indices, innermost last
    std::vector<RegionTime> regions;
    std::unordered_map<std::string, size_t> index;
};

State& state() {
    static State s;
    return s;
}

size_t region_of(State& s, const char* name) {
    std::string path = s.open.empty() ? std::string() : s.regions[s.open.back()].name + "/";
    path += name;
    auto it = s.index.find(path);
    if (it != s.index.end())
        return it->second;
    RegionTime r;
    r.name = path;
    r.depth = static_cast<int>(s.open.size());
    s.regions.push_back(r);
    s.index.emplace(std::move(path), s.regions.size() - 1);
    return s.regions.size() - 1;
}

}  // namespace

void enable(Device device) {
    State& s = state();
    if (s.on)
        return;
    s.on = true;
    s.device = device;
}

bool enabled() {
    return state().on;
}

Range::Range(const char* name, Stream& stream) {
    State& s = state();
    if (!s.on)
        return;
    SR_CHECK(stream.device() == s.device, "profile::Range '{}' on {}, profiling {}", name,
             stream.device().str(), s.device.str());
    if (s.used == s.pairs.size()) {
        Pair p;
        p.begin = std::make_unique<Event>(s.device, /*timing=*/true);
        p.end = std::make_unique<Event>(s.device, /*timing=*/true);
        s.pairs.push_back(std::move(p));
    }
    pair_ = static_cast<int64_t>(s.used++);
    Pair& p = s.pairs[static_cast<size_t>(pair_)];
    p.region = region_of(s, name);
    p.begin->record(stream);
    s.open.push_back(p.region);
    stream_ = &stream;
}

Range::~Range() {
    if (stream_ == nullptr)
        return;
    State& s = state();
    Pair& p = s.pairs[static_cast<size_t>(pair_)];
    p.end->record(*stream_);
    s.open.pop_back();
}

std::vector<RegionTime> collect() {
    State& s = state();
    SR_CHECK(s.open.empty(), "profile::collect inside the open range '{}'",
             s.regions[s.open.back()].name);
    for (size_t i = 0; i < s.used; ++i) {
        const Pair& p = s.pairs[i];
        p.end->synchronize();
        RegionTime& r = s.regions[p.region];
        r.total_ms += Event::elapsed_ms(*p.begin, *p.end);
        r.count += 1;
    }
    s.used = 0;
    return s.regions;
}

void reset() {
    (void)collect();
    State& s = state();
    s.regions.clear();
    s.index.clear();
}

}  // namespace shardrec::profile
