#include "engine/modules/managed_collision_bins.h"

#include <algorithm>
#include <utility>

#include "engine/core/cache_line.h"
#include "kernels/threads.h"

namespace shardrec {

namespace {

// f(i, raw id, place) for the ids i in [lo, hi) of the ranges' concatenation; range_at[r] is where
// range r starts in it.
template <class F>
void for_range_ids(const std::vector<ManagedCollisionRange>& ranges,
                   const std::vector<size_t>& range_at,
                   size_t lo,
                   size_t hi,
                   F&& f) {
    auto r = static_cast<size_t>(std::upper_bound(range_at.begin(), range_at.end(), lo) -
                                 range_at.begin() - 1);
    for (; lo < hi; ++r) {
        // The range's fields in locals: a store of f may alias them.
        const int64_t* ids = ranges[r].ids;
        const size_t first = range_at[r], at = ranges[r].at, end = std::min(hi, range_at[r + 1]);
        for (size_t i = lo; i < end; ++i) {
            f(i, ids[i - first], at + (i - first));
        }
        lo = end;
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
        for_range_ids(ranges, range_at_, lo, hi, [&](size_t i, int64_t raw, size_t) {
            const uint64_t id = hashed(raw);
            const auto part =
                static_cast<size_t>(managed_collision_part(id, kManagedCollisionParts));
            const auto b = static_cast<size_t>(managed_collision_bucket_of_hashed(id, buckets));
            const auto tag = static_cast<uint32_t>(b * P + part);
            tags[i] = tag;
            ++n_of[tag];
        });
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
