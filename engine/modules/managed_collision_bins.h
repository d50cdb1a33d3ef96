// The ids of a step on their way into managed-collision modules (managed_collision.h): which
// bucket of a table and which part of a module an id belongs to, and the binning that hands each
// bucket's module its ids in the order its training forward visits them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/rng.h"

namespace shardrec {

// A raw id after input hashing (our input_hash_func): modulo input_hash_size, by a mask when
// that is a power of two (2^63 by default).
inline uint64_t managed_collision_input_hash(int64_t raw_id, uint64_t input_hash_size) {
    const auto raw = static_cast<uint64_t>(raw_id);
    return (input_hash_size & (input_hash_size - 1)) == 0 ? raw & (input_hash_size - 1)
                                                          : raw % input_hash_size;
}

// The bucket (of total_num_buckets) of an id after input hashing: a salted 64-bit mix of it, so
// ids equal modulo input_hash_size share a bucket, sequential ids spread, and the bucket tells
// nothing of the residual row (mch_hash_func mixes without the salt). TorchRec's
// HashZchManagedCollisionModule splits the hashed id range into its buckets instead; a mix keeps
// raw ids that are small integers from all landing in bucket 0. Inline: the route and the
// binning compute it for every id of a table of several buckets, and a bucket count that is a
// power of two takes a mask instead of a 64-bit division (the same bucket).
inline int64_t managed_collision_bucket_of_hashed(uint64_t id, int64_t buckets) {
    if (buckets <= 1) {
        return 0;
    }
    constexpr uint64_t kSalt = 0x6a09e667f3bcc909ULL;  // any constant: the residual mix has none
    const uint64_t h = rng::mix64(id ^ kSalt), k = static_cast<uint64_t>(buckets);
    return static_cast<int64_t>((k & (k - 1)) == 0 ? h & (k - 1) : h % k);
}

// The bucket of a raw id.
inline int64_t managed_collision_bucket(int64_t raw_id, uint64_t input_hash_size, int64_t buckets) {
    return managed_collision_bucket_of_hashed(managed_collision_input_hash(raw_id, input_hash_size),
                                              buckets);
}

// The CPU threads of a module's training forward each own some of its parts: the slot map and
// the window are split into this many tables by a hash of the id (managed_collision_part).
constexpr int64_t kManagedCollisionParts = 16;

// Batches of fewer ids stay on one thread.
constexpr size_t kManagedCollisionParallelIds = 4096;

// Which of `parts` parts an id (after input hashing) falls in: the top bits of a multiplicative
// hash other than the id tables' own, so each part's ids spread over the whole of its tables.
inline int64_t managed_collision_part(uint64_t id, int64_t parts) {
    const uint64_t h = (id * 0xD6E8FEB86659FD93ull) >> 32;
    return static_cast<int64_t>((h * static_cast<uint64_t>(parts)) >> 32);
}

// Raw ids at consecutive places: ids[0, n), id i's row going to place at + i of the output.
struct ManagedCollisionRange {
    const int64_t* ids = nullptr;
    int64_t n = 0;
    size_t at = 0;
};

// One module's ids of a step in the order its training forward visits them: binned by chunk (a
// contiguous share of the step's ids, one a CPU thread) and within a chunk by part, each with the
// place of its row in the output. Reused from step to step (grow-only).
struct ManagedCollisionIds {
    struct Id {
        size_t at;    // the place of the id's row
        uint64_t id;  // after input hashing
    };

    std::vector<Id> ids;         // [size()] (may be longer)
    std::vector<size_t> bin_at;  // [chunks * kManagedCollisionParts + 1]: where a bin starts
    int64_t chunks = 1;

    size_t size() const { return bin_at.empty() ? 0 : bin_at.back(); }
};

// A step's raw ids of a table's buckets, binned for the buckets' modules by one counting sort
// (the bucket of an id: managed_collision_bucket). Grow-only buffers.
class ManagedCollisionBins {
public:
    // Bins the ids of `ranges` (chunks split their ids in this order) over `buckets` buckets.
    void bin(const std::vector<ManagedCollisionRange>& ranges,
             uint64_t input_hash_size,
             int64_t buckets);

    const ManagedCollisionIds& bucket(int64_t b) const { return buckets_[static_cast<size_t>(b)]; }

private:
    std::vector<ManagedCollisionIds> buckets_;
    std::vector<uint32_t> tags_;             // [ids]: bucket * parts + part
    std::vector<size_t> counts_, range_at_;  // [chunks * tags], [ranges + 1]
};

}  // namespace shardrec
