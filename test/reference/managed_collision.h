// Reference of the managed-collision remap (engine/modules/managed_collision.h), the judge of
// MCHManagedCollisionModule: std::map state and, at each eviction pass, TorchRec's literal
// recipe: the threshold filter over the interval's ids (a mapped id's uses count only if it
// passes), every incumbent slot (free ones last) then every admitted new id in one list, a stable
// sort by score descending, the first usable slots kept. No engine code; integer scores
// (distance_lfu with decay 1 compared as fractions; with another decay, count / distance^decay in
// double), and the probabilistic filter's draw passed in by the test.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

namespace shardrec::ref {

enum class McPolicy { kLfu, kLru, kDistanceLfu };
enum class McThreshold { kNone, kAverage, kDynamic, kProbabilistic };

struct McOptions {
    int64_t zch_size = 0;
    McPolicy policy = McPolicy::kLfu;
    double decay = 1.0;  // lru, distance_lfu: decay_exponent
    int64_t eviction_interval = 1;
    McThreshold threshold = McThreshold::kNone;
    int64_t multiplier = 10;
    double probability = 0.01;
    uint64_t input_hash_size = uint64_t{1} << 63;
    int64_t mch_size = 0;
    int64_t offset = 0;
    // probabilistic: the uniform draw in [0, 1) for (id, step).
    std::function<double(uint64_t id, int64_t step)> draw;
    // the residual row of an unmapped id, in [0, mch_size).
    std::function<int64_t(uint64_t id)> residual;
};

class ManagedCollisionRef {
public:
    explicit ManagedCollisionRef(McOptions options);

    // One training step: the rows of ids.
    std::vector<int64_t> forward(const std::vector<int64_t>& ids);
    std::vector<int64_t> remap(const std::vector<int64_t>& ids) const;
    // Rows reset since the last call, ascending.
    std::vector<int64_t> evict();

    std::map<uint64_t, int64_t> id_to_slot() const;

private:
    struct Meta {
        int64_t count = 0;
        int64_t last = 0;
    };

    void eviction_pass();

    McOptions o_;
    int64_t usable_;
    int64_t step_ = 0;
    std::map<int64_t, uint64_t> slot_to_id_;
    std::map<int64_t, Meta> slot_meta_;
    std::set<int64_t> free_;
    std::map<uint64_t, Meta> window_;
    std::set<int64_t> evicted_;
};

}  // namespace shardrec::ref
