// KJTAllToAll over real ranks: the worked examples 18.1 and 18.2 on rank pairs, random KJTs with
// a variable batch per rank checked against the output every rank computes locally from the
// seeds, a rank with no features, stagger, and ranks that disagree on weights.
#include <catch2/catch.hpp>

#include "engine/distributed/kjt_all_to_all.h"
#include "test/distributed_mpi/dist_mpi_util.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using I64s = std::vector<int64_t>;
using F32s = std::vector<float>;
using Keys = std::vector<std::string>;

namespace {

// 18.1 / 18.2 inputs with An = 100+n, Bn = 200+n, Cn = 300+n, Dn = 400+n; weight = value / 4.
KeyedJaggedTensor example_input(int rank, bool with_d) {
    I64s lengths, values;
    if (rank == 0) {
        lengths = {1, 0, 2, 0, 1, 1, 1, 1, 0};
        values = {100, 101, 102, 200, 201, 300, 301};
        if (with_d) {
            lengths.insert(lengths.end(), {0, 1, 0});
            values.push_back(400);
        }
    } else {
        lengths = {1, 1, 0, 0, 1, 2, 1, 1, 0};
        values = {103, 104, 202, 203, 204, 302, 303};
        if (with_d) {
            lengths.insert(lengths.end(), {1, 1, 2});
            values.insert(values.end(), {401, 402, 403, 404});
        }
    }
    Keys keys = {"A", "B", "C"};
    std::optional<Tensor> weights;
    if (with_d) {
        keys.push_back("D");
        F32s w;
        for (int64_t v : values) {
            w.push_back(static_cast<float>(v) / 4);
        }
        weights = Tensor::from_vector(w);
    }
    return KeyedJaggedTensor::from_lengths_sync(keys, i64(values), i64(lengths), weights);
}

void check_output(const KeyedJaggedTensor& got, const ExpectedKjt& want) {
    CHECK(got.keys() == want.keys);
    CHECK(got.stride() == want.stride);
    CHECK_FALSE(got.variable_stride_per_key());
    CHECK(ivec(got.lengths()) == want.lengths);
    CHECK(ivec(got.values()) == want.values);
    if (!want.weights.empty()) {
        REQUIRE(got.has_weights());
        CHECK(got.weights().to_vector<float>() == want.weights);
    }
}

}  // namespace

TEST_CASE("KJTAllToAll: 18.1 example on two ranks", "[distributed][mpi][even_ranks]") {
    const auto pg = pair_group();
    if (!pg) {
        return;  // needs an even number of ranks
    }
    const int rank = pg->rank();
    KJTAllToAll a2a(pg, {2, 1});
    KJTAllToAllSplitsAwaitable splits_awaitable = a2a.start(example_input(rank, false));
    KJTAllToAllTensorsAwaitable tensors_awaitable = splits_awaitable.tensors();
    const KJTAllToAllSplits& splits = splits_awaitable.splits();
    CHECK(splits.stride_per_rank == I64s{3, 3});
    CHECK(splits.lengths_input_splits == I64s{6, 3});
    CHECK(tensors_awaitable.splits().stride_per_rank == I64s{3, 3});
    const KeyedJaggedTensor out = tensors_awaitable.wait();
    CHECK(out.stride() == 6);
    CHECK_FALSE(out.has_weights());
    if (rank == 0) {
        CHECK(splits.values_input_splits == I64s{5, 2});
        CHECK(splits.values_output_splits == I64s{5, 5});
        CHECK(splits.lengths_output_splits == I64s{6, 6});
        CHECK(out.keys() == Keys{"A", "B"});
        CHECK(ivec(out.lengths()) == I64s{1, 0, 2, 1, 1, 0, 0, 1, 1, 0, 1, 2});
        CHECK(ivec(out.values()) == I64s{100, 101, 102, 103, 104, 200, 201, 202, 203, 204});
    } else {
        CHECK(splits.values_input_splits == I64s{5, 2});
        CHECK(splits.values_output_splits == I64s{2, 2});
        CHECK(splits.lengths_output_splits == I64s{3, 3});
        CHECK(out.keys() == Keys{"C"});
        CHECK(ivec(out.lengths()) == I64s{1, 1, 0, 1, 1, 0});
        CHECK(ivec(out.values()) == I64s{300, 301, 302, 303});
    }
}

TEST_CASE("KJTAllToAll: 18.2 weighted id_score_list features on two ranks",
          "[distributed][mpi][even_ranks]") {
    const auto pg = pair_group();
    if (!pg) {
        return;
    }
    const int rank = pg->rank();
    const KeyedJaggedTensor out = KJTAllToAll(pg, {1, 3}).start(example_input(rank, true)).wait();
    CHECK(out.stride() == 6);
    I64s want_values;
    if (rank == 0) {
        CHECK(out.keys() == Keys{"A"});
        CHECK(ivec(out.lengths()) == I64s{1, 0, 2, 1, 1, 0});
        want_values = {100, 101, 102, 103, 104};
    } else {
        CHECK(out.keys() == Keys{"B", "C", "D"});
        CHECK(ivec(out.lengths()) == I64s{0, 1, 1, 0, 1, 2, 1, 1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 2});
        want_values = {200, 201, 202, 203, 204, 300, 301, 302, 303, 400, 401, 402, 403, 404};
    }
    CHECK(ivec(out.values()) == want_values);
    REQUIRE(out.has_weights());
    F32s want_weights;
    for (int64_t v : want_values) {
        want_weights.push_back(static_cast<float>(v) / 4);
    }
    CHECK(out.weights().to_vector<float>() == want_weights);
}

TEST_CASE("KJTAllToAll: random KJTs, variable batch per rank, random splits",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size();
    for (uint64_t trial = 0; trial < 4; ++trial) {
        const uint64_t seed = test_seed() + 100 * trial;
        RandomKjtSpec spec;
        spec.num_keys = 1 + static_cast<int64_t>(trial % 3) * 2;
        spec.weighted = trial % 2 == 1;
        spec.min_batch = trial == 3 ? 0 : 1;  // trial 3 allows an empty batch on a rank
        const int64_t stagger = (trial == 2 && world_size % 2 == 0) ? 2 : 1;
        INFO("seed " << seed << " keys " << spec.num_keys << " weighted " << spec.weighted
                     << " stagger " << stagger);
        const std::vector<RankInput> inputs = random_inputs(seed, world_size, spec);
        const I64s splits = random_splits(seed, spec.num_keys, world_size);
        KJTAllToAll a2a(pg, splits, stagger);
        KJTAllToAllSplitsAwaitable awaitable = a2a.start(inputs[pg->rank()].kjt());
        const KeyedJaggedTensor out = awaitable.wait();
        check_output(out, expected_kjt_all_to_all(inputs, splits, pg->rank(), stagger));
        I64s batches;
        for (const RankInput& in : inputs) {
            batches.push_back(in.batch);
        }
        CHECK(awaitable.splits().stride_per_rank == batches);
    }
}

TEST_CASE("KJTAllToAll: rank 0 receives no features, batch differs per rank",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size();
    RandomKjtSpec spec;
    spec.num_keys = world_size - 1;
    spec.weighted = true;
    std::vector<RankInput> inputs;
    for (int64_t r = 0; r < world_size; ++r) {  // rank r has batch r + 1
        spec.min_batch = spec.max_batch = r + 1;
        inputs.push_back(random_rank_input(test_seed(), r, spec));
    }
    I64s splits(static_cast<size_t>(world_size), 1);
    splits[0] = 0;
    const KeyedJaggedTensor out = KJTAllToAll(pg, splits).start(inputs[pg->rank()].kjt()).wait();
    const ExpectedKjt want = expected_kjt_all_to_all(inputs, splits, pg->rank());
    check_output(out, want);
    CHECK(out.stride() == world_size * (world_size + 1) / 2);
    if (pg->rank() == 0) {
        CHECK(out.num_keys() == 0);
        CHECK(out.values().numel() == 0);
    }
}

TEST_CASE("KJTAllToAll: ranks that disagree on weights fail on every rank",
          "[distributed][mpi][multirank]") {
    const auto pg = world();
    if (pg->size() == 1) {
        return;  // nobody to disagree with
    }
    RandomKjtSpec spec;
    spec.weighted = pg->rank() == 0;
    const RankInput in = random_rank_input(test_seed(), pg->rank(), spec);
    KJTAllToAll a2a(pg, random_splits(test_seed(), spec.num_keys, pg->size()));
    KJTAllToAllSplitsAwaitable awaitable = a2a.start(in.kjt());
    CHECK_THROWS_WITH(awaitable.tensors(), Catch::Contains("weighted"));
}
