// Helpers of the multi-rank dist_data tests: the groups, random per-rank KJTs that any rank
// regenerates from (seed, rank), the expected KJTAllToAll output computed locally from them
// (never through another collective), and a gradient-division scope.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/tensor.h"
#include "engine/sparse/keyed_jagged_tensor.h"

namespace shardrec::test {

std::shared_ptr<comm::ProcessGroup> world();
// Consecutive rank pairs {0,1}, {2,3}, ... (collective over the world); null at an odd size.
std::shared_ptr<comm::ProcessGroup> pair_group();

Tensor i64(const std::vector<int64_t>& v);
std::vector<int64_t> ivec(const Tensor& t);

// One rank's KJT as per-key, per-sample bags. Ids are rank * kRankIdBase + the value's index in
// this rank's KJT unless id_range > 0 (then uniform in [0, id_range)); weights are dyadic.
struct RankInput {
    static constexpr int64_t kRankIdBase = 1000000;
    std::vector<std::string> keys;
    int64_t batch = 0;
    std::vector<std::vector<std::vector<int64_t>>> ids;    // [F][B][L]
    std::vector<std::vector<std::vector<float>>> weights;  // [F][B][L] when weighted
    bool weighted = false;

    KeyedJaggedTensor kjt() const;
};

struct RandomKjtSpec {
    int64_t num_keys = 3;
    int64_t min_batch = 0;
    int64_t max_batch = 3;  // inclusive; the batch of each rank is drawn from (seed, rank)
    int64_t max_len = 3;    // inclusive
    bool weighted = false;
    int64_t id_range = 0;
};

RankInput random_rank_input(uint64_t seed, int64_t rank, const RandomKjtSpec& spec);
std::vector<RankInput> random_inputs(uint64_t seed, int64_t world_size, const RandomKjtSpec& spec);

// Random splits of num_keys over world_size ranks (zeros allowed), the same for a seed.
std::vector<int64_t> random_splits(uint64_t seed, int64_t num_keys, int64_t world_size);

// What KJTAllToAll(splits, stagger) must give rank `me`: keys of me, then per key the bags of
// every source rank in recat_rank_order(world, stagger) order.
struct ExpectedKjt {
    std::vector<std::string> keys;
    std::vector<int64_t> lengths;
    std::vector<int64_t> values;
    std::vector<float> weights;
    int64_t stride = 0;
};

ExpectedKjt expected_kjt_all_to_all(const std::vector<RankInput>& inputs,
                                    const std::vector<int64_t>& splits,
                                    int64_t me,
                                    int64_t stagger = 1);

// Sets gradient division for a scope and restores the previous value.
class GradientDivisionScope {
public:
    explicit GradientDivisionScope(bool on);
    ~GradientDivisionScope();
    GradientDivisionScope(const GradientDivisionScope&) = delete;
    GradientDivisionScope& operator=(const GradientDivisionScope&) = delete;

private:
    bool saved_;
};

}  // namespace shardrec::test
