// Counter-based random numbers: every value is a pure function of (seed, stream, index), so any
// rank, thread or device can regenerate the same number without shared state. Embedding rows are
// initialised from (seed, table, row) and synthetic samples from (seed, sample index) this way.
#pragma once

#include <cmath>
#include <cstdint>

// The integer hashing below also runs in CUDA kernels (device-side table initialisation).
#ifdef __CUDACC__
#define SR_HOST_DEVICE __host__ __device__
#else
#define SR_HOST_DEVICE
#endif

namespace shardrec::rng {

// splitmix64 finaliser: a bijective 64-bit mix with full avalanche.
SR_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// hash(seed, a, b, c) in two parts, for many c under one (seed, a, b): the prefix once, then
// hash_suffix(prefix, c) == hash(seed, a, b, c) for each c.
SR_HOST_DEVICE inline uint64_t hash_prefix(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t h = mix64(seed ^ 0x5851f42d4c957f2dull);
    h = mix64(h ^ a);
    return mix64(h ^ (b * 0xd6e8feb86659fd93ull));
}

SR_HOST_DEVICE inline uint64_t hash_suffix(uint64_t prefix, uint64_t c) {
    return mix64(prefix ^ (c * 0xa0761d6478bd642full));
}

inline uint64_t hash(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
    return hash_suffix(hash_prefix(seed, a, b), c);
}

// Uniform in [0, 1) with 53 random bits.
SR_HOST_DEVICE inline double uniform01(uint64_t bits) {
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

inline double uniform(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
    return uniform01(hash(seed, a, b, c));
}

// Standard normal by Box-Muller from two independent counters.
inline double normal(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
    const double u1 = 1.0 - uniform01(hash(seed, a, b, 2 * c));
    const double u2 = uniform01(hash(seed, a, b, 2 * c + 1));
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A small sequential generator for tests and tools that just need a stream of numbers.
class Rng {
public:
    explicit Rng(uint64_t seed, uint64_t stream = 0) : seed_(seed), stream_(stream) {}

    uint64_t next_u64() { return hash(seed_, stream_, counter_++); }

    double uniform() { return uniform01(next_u64()); }

    float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(uniform()); }

    int64_t randint(int64_t lo, int64_t hi) {  // [lo, hi)
        return lo + static_cast<int64_t>(next_u64() % static_cast<uint64_t>(hi - lo));
    }

    double normal() { return rng::normal(seed_, stream_, counter_++); }

private:
    uint64_t seed_;
    uint64_t stream_;
    uint64_t counter_ = 0;
};

}  // namespace shardrec::rng
