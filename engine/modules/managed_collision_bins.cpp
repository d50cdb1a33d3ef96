#include "engine/modules/managed_collision_bins.h"

#include <algorithm>
#include <utility>

#include "engine/core/cache_line.h"
#include "kernels/cpu/avx512_clones.h"
#include "kernels/threads.h"

namespace shardrec {

namespace {

// f(i, ids, n, place) for the pieces of the ids [lo, hi) of the ranges' concatenation that lie in
// one range each: ids[k] is id i + k of the concatenation, its row going to place + k; range_at[r]
// is where range r starts in it.
template <class F>
void for_range_pieces(const std::vector<ManagedCollisionRange>& ranges,
                      const std::vector<size_t>& range_at,
                      size_t lo,
                      size_t hi,
                      F&& f) {
    auto r = static_cast<size_t>(std::upper_bound(range_at.begin(), range_at.end(), lo) -
                                 range_at.begin() - 1);
    for (; lo < hi; ++r) {
        const size_t first = range_at[r], end = std::min(hi, range_at[r + 1]);
        f(lo, ranges[r].ids + (lo - first), end - lo, ranges[r].at + (lo - first));
        lo = end;
    }
}

// f(i, raw id, place) for the ids i in [lo, hi) of the ranges' concatenation.
template <class F>
void for_range_ids(const std::vector<ManagedCollisionRange>& ranges,
                   const std::vector<size_t>& range_at,
                   size_t lo,
                   size_t hi,
                   F&& f) {
    // A piece's fields arrive as values: a store of f cannot alias them.
    for_range_pieces(ranges, range_at, lo, hi,
                     [&](size_t i0, const int64_t* ids, size_t n, size_t at) {
                         for (size_t k = 0; k < n; ++k) {
                             f(i0 + k, ids[k], at + k);
                         }
                     });
}

// tags[i] = bucket * kManagedCollisionParts + part of ids[i], i < n: integer arithmetic, the same
// in either build; the AVX-512 build vectorises the hashes' 64-bit multiplies (the bucket's mix
// among them), which cost a table of several buckets about 20 us a step of 20 K ids on 2 threads.
SR_AVX512_CLONES void tag_ids(const int64_t* __restrict ids,
                              size_t n,
                              uint64_t input_hash_size,
                              int64_t buckets,
                              uint32_t* __restrict tags) {
    constexpr auto P = static_cast<uint64_t>(kManagedCollisionParts);
    for (size_t i = 0; i < n; ++i) {
        const uint64_t id = managed_collision_input_hash(ids[i], input_hash_size);
        const auto part = static_cast<uint64_t>(managed_collision_part(id, kManagedCollisionParts));
        const auto b = static_cast<uint64_t>(managed_collision_bucket_of_hashed(id, buckets));
        tags[i] = static_cast<uint32_t>(b * P + part);
    }
}

}  // namespace

// Two passes over the ids, each chunk on a CPU thread: each id's bucket and part (its tag) and
// the chunk's count of each tag, then, with every bin's start known, the ids to their bins (a
// stable counting sort, so a bin's order, and every module's input, does not depend on the
// thread count beyond the chunks it splits them into).
void ManagedCollisionBins::bin(const std::vector<ManagedCollisionRange>& ranges,
                               uint64_t input_hash_size,
                               int64_t buckets) {
    const auto K = static_cast<size_t>(std::max<int64_t>(buckets, 1));
    constexpr auto P = static_cast<size_t>(kManagedCollisionParts);
    range_at_.assign(1, 0);
    for (const ManagedCollisionRange& r : ranges) {
        range_at_.push_back(range_at_.back() + static_cast<size_t>(std::max<int64_t>(r.n, 0)));
    }
    const size_t count = range_at_.back();
    const int64_t chunks = count >= kManagedCollisionParallelIds
                               ? std::min<int64_t>(kernels::cpu_threads(), kManagedCollisionParts)
                               : 1;
    const auto C = static_cast<size_t>(chunks);
    const size_t stride = own_lines_stride(K * P);
    counts_.assign(C * stride, 0);
    if (tags_.size() < count) {
        tags_.resize(count);
    }
    const auto hashed = [input_hash_size](int64_t raw) {
        return managed_collision_input_hash(raw, input_hash_size);
    };
    const auto chunk = [&](size_t c) { return std::pair{count * c / C, count * (c + 1) / C}; };
    uint32_t* tags = tags_.data();
    kernels::parallel_tasks(chunks, [&](int64_t c) {
        size_t* n_of = counts_.data() + static_cast<size_t>(c) * stride;
        const auto [lo, hi] = chunk(static_cast<size_t>(c));
        // The tags first (a pure function of each id: tag_ids), then their counts.
        for_range_pieces(ranges, range_at_, lo, hi,
                         [&](size_t i0, const int64_t* ids, size_t n, size_t) {
                             tag_ids(ids, n, input_hash_size, buckets, tags + i0);
                         });
        for (size_t i = lo; i < hi; ++i) {
            ++n_of[tags[i]];
        }
    });
    // Bucket b's ids: chunk by chunk, part by part; the counts become each bin's next place.
    if (buckets_.size() < K) {
        buckets_.resize(K);
    }
    std::vector<ManagedCollisionIds::Id*> base(K);
    for (size_t b = 0; b < K; ++b) {
        ManagedCollisionIds& out = buckets_[b];
        out.chunks = chunks;
        out.bin_at.resize(C * P + 1);
        size_t at = 0;
        for (size_t c = 0; c < C; ++c) {
            for (size_t p = 0; p < P; ++p) {
                out.bin_at[c * P + p] = at;
                at += std::exchange(counts_[c * stride + b * P + p], at);
            }
        }
        out.bin_at[C * P] = at;
        if (out.ids.size() < at) {
            out.ids.resize(at);
        }
        base[b] = out.ids.data();
    }
    kernels::parallel_tasks(chunks, [&](int64_t c) {
        size_t* next = counts_.data() + static_cast<size_t>(c) * stride;
        const auto [lo, hi] = chunk(static_cast<size_t>(c));
        for_range_ids(ranges, range_at_, lo, hi, [&](size_t i, int64_t raw, size_t at) {
            const uint32_t tag = tags[i];
            base[tag / P][next[tag]++] = {at, hashed(raw)};
        });
    });
}

}  // namespace shardrec
