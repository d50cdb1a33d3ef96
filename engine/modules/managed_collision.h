// Managed collision (TorchRec mc_modules): MCHManagedCollisionModule maps raw 64-bit ids of one
// table to rows without hashing collisions. zch_size slots hold one id each ("zero collision");
// the per-slot metadata (count, last access step) decides, every eviction_interval steps, which
// slots the eviction policy (lfu, lru, distance_lfu) gives to new ids that the threshold filter
// admits. Ids without a slot go to the residual range (mch_size) or, with mch_size 0, to the
// fallback row. Evicted rows are reported by evict() so the caller resets them.
//
// Deterministic: every decision is a function of the multiset of ids of each step, never of their
// order within a step, of hash-map iteration order, of the CPU thread count (a step's ids and a
// pass's lists are split over the threads) or of a global RNG (probabilistic admission draws
// from hash(seed, id, step)).
//
// Step semantics, as TorchRec's profile()/remap(): a training forward counts a step (the first is
// step 1), records its ids, runs the eviction pass when step % eviction_interval == 0, then remaps
// the same ids; so the new ids of an eviction step can get a slot in that step. A threshold filter
// judges every id of the interval, as TorchRec's filters its coalesced history: a new id that
// fails it gets no slot, a mapped one's uses of the interval are not counted. Once its slots are
// full the module keeps the same ids as TorchRec's own (test_modules "[torchrec]", a fixture
// TorchRec 1.0.0 wrote); before, new ids take free slots at once where TorchRec waits for a pass.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/cache_line.h"
#include "engine/modules/id_table.h"
#include "engine/modules/managed_collision_bins.h"

namespace shardrec {

// TorchRec LFU_EvictionPolicy, LRU_EvictionPolicy, DistanceLFU_EvictionPolicy; the last two take
// ManagedCollisionOptions::decay_exponent (LRU's order does not depend on it).
enum class EvictionPolicy { kLfu, kLru, kDistanceLfu };

// TorchRec threshold_filtering_func: none, average_threshold_filter,
// dynamic_threshold_filter(threshold_skew_multiplier), probabilistic_threshold_filter(p).
enum class ThresholdKind { kNone, kAverage, kDynamic, kProbabilistic };

struct ThresholdFilter {
    ThresholdKind kind = ThresholdKind::kNone;
    int64_t multiplier = 10;    // dynamic: admit when count > total / num_ids * multiplier
    double probability = 0.01;  // probabilistic: admit with probability 1 - (1 - p)^count
};

struct ManagedCollisionOptions {
    int64_t zch_size = 0;
    EvictionPolicy eviction_policy = EvictionPolicy::kLfu;
    // > 0. distance_lfu scores count / (step - last + 1)^decay_exponent (TorchRec's default 1).
    double decay_exponent = 1.0;
    int64_t eviction_interval = 1;
    ThresholdFilter threshold;
    // Raw ids are taken modulo input_hash_size (our input_hash_func), as uint64; in [1, 2^63].
    uint64_t input_hash_size = uint64_t{1} << 63;
    int64_t mch_size = 0;              // residual rows after the zch slots
    int64_t output_global_offset = 0;  // first row of slot 0 (row-wise shards)
    uint64_t seed = 0;                 // probabilistic admission
};

// "lfu" -> kLfu ...; returns false on an unknown name.
bool parse_eviction_policy(const std::string& name, EvictionPolicy* out);
const char* eviction_policy_name(EvictionPolicy policy);
// "none", "average", "dynamic" (multiplier 10), "dynamic:N" (integer N >= 1), "probabilistic"
// (p 0.01), "probabilistic:p" (0 < p <= 1). Returns an empty string, or what is wrong.
std::string parse_threshold_filter(const std::string& text, ThresholdFilter* out);
std::string threshold_filter_name(const ThresholdFilter& filter);

// Everything that an exact resume needs, in plain vectors (checkpoints store them as they are).
struct ManagedCollisionState {
    int64_t step = 0;
    std::vector<uint64_t> slot_ids;    // [occupied slots]: slots 0..n-1 are occupied
    std::vector<int64_t> slot_counts;  // [occupied slots]
    std::vector<int64_t> slot_lasts;   // [occupied slots]
    // Ids seen since the last eviction pass, ascending: those without a slot, and with a
    // threshold filter the mapped ones too, whose uses of the interval the pass keeps in their
    // slot's count and last only if the filter admits them (slot_counts and slot_lasts hold the
    // values from before the interval). Without a filter a slot's uses are in its count at once.
    std::vector<uint64_t> window_ids;
    std::vector<int64_t> window_counts;
    std::vector<int64_t> window_lasts;
    int64_t window_total = 0;                // ids (with repeats) seen since the last eviction pass
    std::vector<int64_t> pending_evictions;  // rows not yet returned by evict()
    int64_t evictions_total = 0;
    int64_t admissions_total = 0;
};

// A slot's or a candidate's metadata in an eviction pass, for the policy's score.
struct ManagedCollisionScored {
    int64_t count = 0;
    int64_t last = 0;
    uint64_t id = 0;
    int64_t slot = -1;  // incumbents only
    // The score in floating point, a fast path for the exact comparison (NaN: none).
    double key = 0.0;
};

class MCHManagedCollisionModule {
public:
    // name: the table, for errors. Throws on options out of range.
    MCHManagedCollisionModule(std::string name, const ManagedCollisionOptions& options);

    // Training forward: profile (count a step, record the ids, evict every eviction_interval
    // steps) then remap. Each id's row, in [offset, offset + output_size()), goes to out[at];
    // the ids binned with this table's input_hash_size.
    // Returns how many of the ids own a slot.
    int64_t forward(const ManagedCollisionIds& ids, int64_t* out);
    // Read-only (eval, predict): mapped ids to their row, others to the residual or fallback.
    // Returns how many of the ids own a slot.
    int64_t remap(const ManagedCollisionIds& ids, int64_t* out) const;
    // The same for ids [n] raw, rows to out [n].
    int64_t forward(const int64_t* ids, int64_t n, int64_t* out);
    int64_t remap(const int64_t* ids, int64_t n, int64_t* out) const;

    // Rows (with the offset) whose slot changed owner since the last call, ascending and unique;
    // the caller resets their weights to the initial values and their optimizer state to zero.
    std::vector<int64_t> evict();

    int64_t output_size() const { return options_.zch_size + options_.mch_size; }

    uint64_t input_size() const { return options_.input_hash_size; }

    // Slots ids can own: zch_size, less the fallback slot when mch_size is 0.
    int64_t usable_slots() const { return usable_; }

    int64_t occupancy() const { return static_cast<int64_t>(slot_ids_.size()); }

    int64_t step() const { return step_; }

    int64_t evictions_total() const { return evictions_total_; }

    int64_t admissions_total() const { return admissions_total_; }

    // The slot of an id (after input hashing), or -1.
    int64_t slot_of(int64_t raw_id) const;

    const ManagedCollisionOptions& options() const { return options_; }

    // Host bytes the slots of a full module take (its slot map and the slots' ids), for the
    // memory check; the window of an interval's ids comes on top.
    static int64_t slot_bytes(int64_t zch_size);

    ManagedCollisionState state() const;
    // Throws when the state does not fit these options (sizes, order).
    void load_state(const ManagedCollisionState& state);

private:
    struct Seen {
        int64_t count = 0;
        int64_t last = 0;
    };

    // A mapped id's slot and the slot's metadata, in one cell: profile touches one cache line.
    struct Slot {
        int64_t slot = 0;
        int64_t count = 0;
        int64_t last = 0;
    };

    // Counts a step and records its ids (evicting at an eviction step), writing each id's row as
    // the slots stand before any new id takes one; returns how many of the ids had a slot then.
    int64_t profile(const ManagedCollisionIds& ids, int64_t* out);
    int64_t unmapped_row(uint64_t id) const;
    bool admitted(uint64_t id, int64_t count, uint64_t num_ids, uint64_t total) const;
    void eviction_pass();

    std::string name_;
    ManagedCollisionOptions options_;
    int64_t usable_ = 0;
    int64_t step_ = 0;
    // Slots fill in order 0, 1, ... and never empty again, so the occupied slots are a prefix.
    std::vector<uint64_t> slot_ids_;
    // The mapped ids, and the ids seen without a slot since the last pass (the window), each in
    // kParts tables by managed_collision_part, so the CPU threads probe, fill and change
    // them at once, each its own parts. Iterated only into lists that are then ordered by a
    // total order (score, id) or by slot/id.
    static constexpr int64_t kParts = kManagedCollisionParts;
    std::array<IdTable<Slot>, kParts> slots_;
    std::array<IdTable<Seen>, kParts> window_;

    IdTable<Slot>& slots_of(uint64_t id);
    const IdTable<Slot>& slots_of(uint64_t id) const;

    template <class F>
    void for_each_window(F&& f) const {
        for (const IdTable<Seen>& window : window_) {
            window.for_each(f);
        }
    }

    // With a threshold filter, by part: the slots used since the last pass with their count and
    // last before it, to go back to if the filter does not admit the interval's uses
    // (judge_used). Without a filter, empty.
    struct Used {
        uint64_t id;
        int64_t count, last;
    };

    std::array<OwnLine<std::vector<Used>>, kParts> used_;
    uint64_t judge_used(uint64_t total);

    int64_t window_total_ = 0;  // uses since the last pass, the filters' statistic
    // Whether an id may have taken a free slot since the last pass (then it is in both).
    bool window_may_hold_slots_ = true;
    std::vector<int64_t> pending_evictions_;
    int64_t evictions_total_ = 0;
    int64_t admissions_total_ = 0;
    std::vector<uint64_t> fresh_;  // scratch: a step's unmapped ids
    ManagedCollisionBins bins_;    // scratch: forward's ids binned
    // scratch: the step's ids without a slot, by part
    std::array<OwnLine<std::vector<uint64_t>>, kParts> unmapped_parts_;
    // scratch of the eviction pass, kept so a pass of the same size allocates (and faults) nothing
    std::vector<ManagedCollisionScored> candidates_, worst_;
    std::array<OwnLine<std::vector<ManagedCollisionScored>>, kParts> listed_;
    // scratch of a pass: evicted ids by part, and the admitted candidates' places
    std::array<OwnLine<std::vector<uint64_t>>, kParts> gone_;
    std::array<OwnLine<std::vector<size_t>>, kParts> taking_;
    std::vector<uint64_t> slot_bits_;  // scratch of a pass: a bit a slot
};

}  // namespace shardrec
