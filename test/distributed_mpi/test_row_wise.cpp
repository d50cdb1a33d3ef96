// Row-wise sharding's data path over real ranks: bucketize_kjt_before_all2all + KJTAllToAll
// (splits [F] * world) + a host-loop lookup of each shard's rows, then
//   pooled:   the partial sums reduce-scattered equal a single-process pooled SUM of my batch;
//   sequence: the rows come back through unbucketize_permute in my original value order, and
//             the backward sends every gradient row to the shard and position of its id.
// Every expected value is computed locally from the seeds, bucketizing every rank's input here.
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "engine/distributed/bucketize.h"
#include "engine/distributed/kjt_all_to_all.h"
#include "engine/distributed/pooled_embeddings.h"
#include "engine/distributed/sequence_embeddings.h"
#include "test/distributed_mpi/dist_mpi_util.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using I64s = std::vector<int64_t>;
using F32s = std::vector<float>;

namespace {

constexpr int64_t kDim = 2;

// Row `id` of table `key` (the unsharded table, any id, also past E): a multiple of 1/2.
float table(uint64_t seed, int64_t key, int64_t id, int64_t d) {
    const uint64_t h = rng::hash(seed, static_cast<uint64_t>(key), static_cast<uint64_t>(id),
                                 static_cast<uint64_t>(d));
    return static_cast<float>(static_cast<int64_t>(h % 23) - 11) * 0.5f;
}

// The global id of shard `rank`'s local id (the inverse of the bucketize rule).
int64_t global_id(int64_t local, int64_t rank, int64_t block, int64_t world_size) {
    return local < block ? rank * block + local : local * world_size + rank;
}

struct RowWiseSetup {
    std::vector<RankInput> inputs;
    I64s blocks;
    BucketizedKJT bucketized;  // mine
    KeyedJaggedTensor local;   // after the all-to-all
    KJTAllToAllSplits splits;
};

RowWiseSetup run_input_dist(const std::shared_ptr<comm::ProcessGroup>& pg,
                            uint64_t seed,
                            bool weighted) {
    const int64_t world_size = pg->size();
    RandomKjtSpec spec;
    spec.num_keys = 3;
    spec.weighted = weighted;
    spec.max_len = 4;
    spec.id_range = 13;  // tables of 11 rows: ids 11 and 12 exercise the past-the-table rule
    RowWiseSetup s;
    s.inputs = random_inputs(seed, world_size, spec);
    s.blocks.assign(3, (11 + world_size - 1) / world_size);
    s.bucketized = bucketize_kjt_before_all2all(s.inputs[pg->rank()].kjt(), world_size, s.blocks);
    KJTAllToAll a2a(pg, I64s(static_cast<size_t>(world_size), spec.num_keys));
    KJTAllToAllSplitsAwaitable awaitable = a2a.start(s.bucketized.features);
    s.local = awaitable.wait();
    s.splits = awaitable.splits();
    return s;
}

// Where local value j came from: (source rank, index in that rank's input values), found by
// bucketizing every rank's input here and walking bucket `me`'s bags in output order.
std::vector<std::pair<int64_t, int64_t>> origins(const RowWiseSetup& s, int64_t me) {
    const auto world_size = static_cast<int64_t>(s.inputs.size());
    const int64_t num_keys = static_cast<int64_t>(s.blocks.size());
    std::vector<BucketizedKJT> all;
    std::vector<I64s> inverse, offsets;
    for (int64_t r = 0; r < world_size; ++r) {
        all.push_back(bucketize_kjt_before_all2all(s.inputs[r].kjt(), world_size, s.blocks));
        const I64s perm = ivec(*all.back().unbucketize_permute);
        inverse.emplace_back(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) {
            inverse.back()[perm[i]] = static_cast<int64_t>(i);
        }
        offsets.emplace_back(1, 0);
        for (int64_t len : ivec(all.back().features.lengths)) {
            offsets.back().push_back(offsets.back().back() + len);
        }
    }
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t f = 0; f < num_keys; ++f) {
        for (int64_t r = 0; r < world_size; ++r) {
            const int64_t batch = s.inputs[r].batch;
            for (int64_t b = 0; b < batch; ++b) {
                const int64_t bag = (me * num_keys + f) * batch + b;
                for (int64_t p = offsets[r][bag]; p < offsets[r][bag + 1]; ++p) {
                    out.emplace_back(r, inverse[r][p]);
                }
            }
        }
    }
    return out;
}

}  // namespace

namespace {

// The shard's partial pooled sums [B_global, F * kDim] of the local KJT, rows in source order.
Tensor shard_partial_sums(const RowWiseSetup& s, uint64_t seed, int64_t me, int64_t world_size) {
    const int64_t num_keys = s.local.num_keys();
    const int64_t global_batch = s.local.stride();
    F32s partial(static_cast<size_t>(global_batch * num_keys * kDim), 0.0f);
    const I64s ids = ivec(s.local.values());
    const I64s off = ivec(s.local.offsets());
    const F32s w = s.local.has_weights() ? s.local.weights().to_vector<float>() : F32s{};
    for (int64_t f = 0; f < num_keys; ++f) {
        for (int64_t j = 0; j < global_batch; ++j) {
            const int64_t bag = f * global_batch + j;
            for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
                const int64_t id = global_id(ids[i], me, s.blocks[f], world_size);
                for (int64_t d = 0; d < kDim; ++d) {
                    partial[(j * num_keys + f) * kDim + d] +=
                        (w.empty() ? 1.0f : w[i]) * table(seed, f, id, d);
                }
            }
        }
    }
    return Tensor::from_vector(partial, {global_batch, num_keys * kDim});
}

// The unsharded pooled SUM [B, F * kDim] of one rank's batch.
F32s unsharded_pooled_sum(const RankInput& in, uint64_t seed) {
    F32s out;
    for (int64_t b = 0; b < in.batch; ++b) {
        for (size_t f = 0; f < in.keys.size(); ++f) {
            for (int64_t d = 0; d < kDim; ++d) {
                float sum = 0.0f;
                for (size_t i = 0; i < in.ids[f][b].size(); ++i) {
                    sum += (in.weighted ? in.weights[f][b][i] : 1.0f) *
                           table(seed, static_cast<int64_t>(f), in.ids[f][b][i], d);
                }
                out.push_back(sum);
            }
        }
    }
    return out;
}

}  // namespace

TEST_CASE("Row-wise: bucketize + all-to-all + shard sums + reduce-scatter = pooled sum",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t me = pg->rank();
    for (const bool weighted : {false, true}) {
        const uint64_t seed = test_seed() + (weighted ? 1 : 0);
        INFO("seed " << seed << " weighted " << weighted);
        const RowWiseSetup s = run_input_dist(pg, seed, weighted);
        const int64_t num_keys = static_cast<int64_t>(s.blocks.size());
        REQUIRE(s.local.num_keys() == num_keys);
        REQUIRE(s.local.has_weights() == weighted);
        PooledEmbeddingsReduceScatter rs(pg);
        const Tensor pooled =
            rs.forward(shard_partial_sums(s, seed, me, pg->size()), s.splits.stride_per_rank);
        CHECK(pooled.shape() == Shape{s.inputs[me].batch, num_keys * kDim});
        CHECK(pooled.to_vector<float>() == unsharded_pooled_sum(s.inputs[me], seed));
    }
}

TEST_CASE("Row-wise: sequence rows return in the original order; backward reaches the shards",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size();
    const int64_t me = pg->rank();
    const uint64_t seed = test_seed() + 3;
    const RowWiseSetup s = run_input_dist(pg, seed, false);
    const int64_t num_keys = static_cast<int64_t>(s.blocks.size());
    const auto from = origins(s, me);
    const I64s ids = ivec(s.local.values());
    REQUIRE(from.size() == ids.size());

    // Lookup on the shard, one row per local id; check each id against its origin too.
    std::vector<I64s> source_ids;
    for (const RankInput& in : s.inputs) {
        source_ids.push_back(ivec(in.kjt().values()));
    }
    F32s rows;
    for (int64_t f = 0, j = 0; f < num_keys; ++f) {
        for (; j < s.local.offset_per_key()[f + 1]; ++j) {
            const auto [rank, index] = from[j];
            const int64_t id = global_id(ids[j], me, s.blocks[f], world_size);
            REQUIRE(id == source_ids[rank][index]);
            for (int64_t d = 0; d < kDim; ++d) {
                rows.push_back(table(seed, f, id, d));
            }
        }
    }
    const auto n_local = static_cast<int64_t>(ids.size());
    SequenceEmbeddingsAllToAll seq(pg, I64s(static_cast<size_t>(world_size), num_keys));
    const Tensor out = seq.forward(Tensor::from_vector(rows, {n_local, kDim}), s.local.lengths(),
                                   s.splits, &*s.bucketized.unbucketize_permute);
    const KeyedJaggedTensor mine = s.inputs[me].kjt();
    F32s want;
    for (int64_t f = 0; f < num_keys; ++f) {
        for (int64_t i = mine.offset_per_key()[f]; i < mine.offset_per_key()[f + 1]; ++i) {
            for (int64_t d = 0; d < kDim; ++d) {
                want.push_back(table(seed, f, ivec(mine.values())[i], d));
            }
        }
    }
    CHECK(out.to_vector<float>() == want);

    // Backward: my value i's gradient row (seed + 1, me, i) must reach local position j.
    const GradientDivisionScope division(false);
    const int64_t n_mine = mine.values().numel();
    F32s grad;
    for (int64_t i = 0; i < n_mine; ++i) {
        for (int64_t d = 0; d < kDim; ++d) {
            grad.push_back(table(seed + 1, me, i, d));
        }
    }
    const Tensor grad_in = seq.backward(Tensor::from_vector(grad, {n_mine, kDim}));
    F32s want_grad;
    for (const auto& [rank, index] : from) {
        for (int64_t d = 0; d < kDim; ++d) {
            want_grad.push_back(table(seed + 1, rank, index, d));
        }
    }
    CHECK(grad_in.to_vector<float>() == want_grad);
}
