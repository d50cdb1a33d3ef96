// ShardedEmbeddingCollection over real ranks against the unsharded EmbeddingCollection: every
// rank builds the global batch from the seed (samples of rank 0 first, each rank a different
// batch size), runs EmbeddingCollection on all of it and the sharded one on its own slice, with no
// collective in the oracle. The sequence rows must be bitwise equal, and after steps of backward
// with SGD, Adagrad and Adam, and row-wise Adagrad where no table is split by columns (gradient
// division off: the sharded ranks get the global batch's gradient rows, so each row must end as
// one process makes it) the table rows and optimizer states, read through shard_states() and
// unsharded_weight(), too; the bytes held follow from the plan.
// Plans: a mixed one (table_wise on a shared table, column_wise of uneven widths 1, 1, 2 with two
// shards on one rank, row_wise of 5 rows, so at 4 ranks the last block is empty), one where
// rank 0 holds no table, one with every table data_parallel and a mixed one with the shared table
// data_parallel. Bags are often empty. Gradients are dyadic (exact sums in any order), and for
// data_parallel also not (sums that round, so duplicate ids must be aggregated in the order one
// process sees them: feature, then rank 0's samples, rank 1's, ...).
#include <array>
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "engine/distributed/sharded_embedding_collection.h"
#include "engine/modules/embedding_collection.h"
#include "test/distributed_mpi/dist_mpi_util.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using I64s = std::vector<int64_t>;
using F32s = std::vector<float>;

namespace {

constexpr int64_t kDim = 4;

std::vector<EmbeddingConfig> tables() {
    return {{"t_tw", 7, kDim, {"f0", "f1"}, DType::kF32},
            {"t_cw", 6, kDim, {"f2"}, DType::kF32},
            {"t_rw", 5, kDim, {"f3", "f4"}, DType::kF32}};
}

int64_t batch_of(int64_t rank) {
    return 1 + rank % 2;
}

// A dyadic value in [-2.75, 2.75] from (seed, a, b, c): gradients stay exact in f32.
float dyadic(uint64_t seed, int64_t a, int64_t b, int64_t c) {
    const uint64_t h = rng::hash(seed, static_cast<uint64_t>(a), static_cast<uint64_t>(b),
                                 static_cast<uint64_t>(c));
    return static_cast<float>(static_cast<int64_t>(h % 23) - 11) * 0.25f;
}

// The batch of samples [first, first + n) of the global batch of `step`: keys listed in
// reverse order (a KJT may list them in any order), bags of 0..3 ids.
KeyedJaggedTensor batch(uint64_t seed, int64_t step, int64_t first, int64_t n) {
    const auto ts = tables();
    std::vector<std::string> keys;
    std::vector<int64_t> rows;
    for (const auto& t : ts) {
        for (const auto& f : t.feature_names) {
            keys.insert(keys.begin(), f);
            rows.insert(rows.begin(), t.num_embeddings);
        }
    }
    I64s lengths, values;
    for (size_t k = 0; k < keys.size(); ++k) {
        for (int64_t b = first; b < first + n; ++b) {
            const uint64_t h = rng::hash(seed, static_cast<uint64_t>(step), k, b);
            const int64_t len = static_cast<int64_t>(h % 4);
            lengths.push_back(len);
            for (int64_t i = 0; i < len; ++i)
                values.push_back(
                    static_cast<int64_t>(rng::hash(h, i) % static_cast<uint64_t>(rows[k])));
        }
    }
    return KeyedJaggedTensor::from_lengths_sync(keys, i64(values), i64(lengths));
}

enum class PlanKind { kMixed, kRank0Empty, kDataParallel, kMixedDataParallel };

const char* plan_name(PlanKind kind) {
    switch (kind) {
        case PlanKind::kMixed:
            return "mixed";
        case PlanKind::kRank0Empty:
            return "rank 0 holds no table";
        case PlanKind::kDataParallel:
            return "data_parallel";
        case PlanKind::kMixedDataParallel:
            return "mixed with data_parallel";
    }
    return "?";
}

ShardingPlan make_plan(int world, PlanKind kind) {
    const PlacementEnv env{world, world, "cpu"};
    const auto ts = tables();
    const auto fused = EmbeddingComputeKernel::kFused;
    const int r1 = 1 % world;
    ShardingPlan plan;
    plan.env = env;
    if (kind == PlanKind::kDataParallel) {
        for (const auto& t : ts) {
            plan.tables[t.name] =
                make_parameter_sharding(ShardingType::kDataParallel, EmbeddingComputeKernel::kDense,
                                        t.num_embeddings, kDim, all_ranks(world), {}, env);
        }
        return plan;
    }
    plan.tables["t_tw"] =
        make_parameter_sharding(ShardingType::kTableWise, fused, 7, kDim, {r1}, {}, env);
    if (kind == PlanKind::kMixedDataParallel) {  // the table two features share
        plan.tables["t_tw"] =
            make_parameter_sharding(ShardingType::kDataParallel, EmbeddingComputeKernel::kDense, 7,
                                    kDim, all_ranks(world), {}, env);
    }
    // Three column shards of widths 1, 1, 2; at 2 ranks the first and the last share rank 1.
    const std::vector<int> cw_ranks = {r1, world > 2 ? 2 : 0, world > 3 ? 3 : r1};
    plan.tables["t_cw"] = make_parameter_sharding(ShardingType::kColumnWise, fused, 6, kDim,
                                                  cw_ranks, {1, 1, 2}, env);
    if (kind == PlanKind::kRank0Empty) {
        plan.tables["t_rw"] =
            make_parameter_sharding(ShardingType::kTableWise, fused, 5, kDim, {world - 1}, {}, env);
        if (world > 1) {
            plan.tables["t_cw"] = make_parameter_sharding(ShardingType::kColumnWise, fused, 6, kDim,
                                                          {1, world - 1}, {}, env);
        }
    } else {
        plan.tables["t_rw"] = make_parameter_sharding(ShardingType::kRowWise, fused, 5, kDim,
                                                      all_ranks(world), {}, env);
    }
    return plan;
}

F32s rows_of(const Tensor& t) {
    return t.to_vector<float>();
}

// Rows [r0, +rows) columns [c0, +cols) of a 2-D f32 tensor, or of a 1-D one (row-wise state).
F32s block(const Tensor& t, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    const F32s all = rows_of(t);
    F32s out;
    if (t.dim() == 1) {
        for (int64_t r = 0; r < rows; ++r)
            out.push_back(all[static_cast<size_t>(r0 + r)]);
        return out;
    }
    const int64_t width = t.size(1);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c)
            out.push_back(all[static_cast<size_t>((r0 + r) * width + c0 + c)]);
    }
    return out;
}

// A gradient value from (seed, a, b, c): dyadic, or (exact = false) one whose sums round.
float grad_value(bool exact, uint64_t seed, int64_t a, int64_t b, int64_t c) {
    const float x = dyadic(seed, a, b, c);
    return exact ? x : x * 0.3f + 0.01f * static_cast<float>(c + 1);
}

struct RunOptions {
    bool gradient_division = false;
    bool exact_gradients = true;
};

void run(const std::shared_ptr<comm::ProcessGroup>& pg,
         const ShardingPlan& plan,
         kernels::OptimType optim_type,
         const RunOptions& options = {}) {
    const bool gradient_division = options.gradient_division;
    const int world = pg->size(), me = pg->rank();
    const uint64_t seed = test_seed();
    kernels::FusedOptimizerParams optim;
    optim.type = optim_type;
    optim.learning_rate = 0.5f;
    EmbeddingCollection ec(tables(), seed, optim);
    ShardedEmbeddingCollection sec(tables(), plan, pg, seed, optim);
    REQUIRE(sec.embedding_names() == ec.embedding_names());
    int64_t global_batch = 0, first = 0;
    for (int r = 0; r < world; ++r) {
        if (r == me)
            first = global_batch;
        global_batch += batch_of(r);
    }
    // With gradient division the sequence all-to-all's backward divides by the world size, so
    // each rank sends its rows times the world size (exact: the sizes are powers of two).
    const GradientDivisionScope division(gradient_division);
    const float scale = gradient_division ? static_cast<float>(world) : 1.0f;
    for (int64_t step = 0; step < 3; ++step) {
        INFO("step " << step);
        const KeyedJaggedTensor global = batch(seed, step, 0, global_batch);
        const KeyedJaggedTensor mine = batch(seed, step, first, batch_of(me));
        const auto want = ec.forward(global);
        const auto got = sec.forward(mine);
        REQUIRE(got.size() == want.size());
        std::vector<std::pair<std::string, Tensor>> global_grads, my_grads;
        for (size_t k = 0; k < want.size(); ++k) {
            INFO("feature " << want[k].first);
            REQUIRE(got[k].first == want[k].first);
            // My samples' ids start after the ids of the samples before mine.
            const I64s lengths = ivec(want[k].second.lengths());
            int64_t v0 = 0;
            for (int64_t b = 0; b < first; ++b)
                v0 += lengths[static_cast<size_t>(b)];
            const int64_t n = got[k].second.values().size(0);
            CHECK(ivec(got[k].second.lengths()) ==
                  I64s(lengths.begin() + first, lengths.begin() + first + batch_of(me)));
            CHECK(rows_of(got[k].second.values()) ==
                  block(want[k].second.values(), v0, n, 0, kDim));
            const int64_t total = want[k].second.values().size(0);
            F32s g;
            for (int64_t i = 0; i < total; ++i) {
                for (int64_t d = 0; d < kDim; ++d)
                    g.push_back(grad_value(options.exact_gradients, seed + 1, step,
                                           static_cast<int64_t>(k) * 1000 + i, d));
            }
            F32s mine_g(g.begin() + v0 * kDim, g.begin() + (v0 + n) * kDim);
            for (float& x : mine_g)
                x *= scale;
            global_grads.emplace_back(want[k].first, Tensor::from_vector(g, {total, kDim}));
            my_grads.emplace_back(got[k].first, Tensor::from_vector(mine_g, {n, kDim}));
        }
        ec.backward(global_grads);
        sec.backward(my_grads);
    }
    // The local shards (no collective) and the assembled tables equal one process's; a
    // data_parallel table is held whole by every rank, marked replicated.
    const auto ts = tables();
    for (const EmbeddingShardState& s : sec.shard_states()) {
        INFO("table " << s.table << " shard rows " << s.row_offset << "+" << s.rows << " cols "
                      << s.col_offset << "+" << s.cols);
        const bool dp = plan.at(ts[static_cast<size_t>(s.table)].name).sharding_type ==
                        ShardingType::kDataParallel;
        CHECK(s.replicated == dp);
        if (dp) {
            CHECK(s.rows == ts[static_cast<size_t>(s.table)].num_embeddings);
            CHECK(s.cols == kDim);
        }
        CHECK(rows_of(s.weight) ==
              block(ec.weight(s.table), s.row_offset, s.rows, s.col_offset, s.cols));
        const std::vector<Tensor> want_state = ec.optimizer_state(s.table);
        REQUIRE(s.optimizer_state.size() == want_state.size());
        for (size_t i = 0; i < want_state.size(); ++i) {
            CHECK(rows_of(s.optimizer_state[i]) ==
                  block(want_state[i], s.row_offset, s.rows, s.col_offset, s.cols));
        }
    }
    for (int64_t t = 0; t < 3; ++t) {
        INFO("table " << t);
        CHECK(rows_of(sec.unsharded_weight(t)) == rows_of(ec.weight(t)));
    }
    // The bytes this rank holds, from the plan: its shards, and every data_parallel table whole.
    int64_t want_params = 0, want_states = 0;
    for (size_t t = 0; t < ts.size(); ++t) {
        const ParameterSharding& ps = plan.at(ts[t].name);
        std::vector<std::array<int64_t, 2>> mine;  // [rows, cols] of my shards
        if (ps.sharding_type == ShardingType::kDataParallel)
            mine.push_back({ts[t].num_embeddings, kDim});
        for (const ShardMetadata& m : ps.sharding_spec) {
            if (m.rank == me)
                mine.push_back(m.shard_sizes);
        }
        for (const auto& [rows, cols] : mine) {
            want_params += rows * cols * 4;
            for (const Tensor& st : ec.optimizer_state(static_cast<int64_t>(t)))
                want_states += rows * (st.dim() == 1 ? 1 : cols) * 4;
        }
    }
    CHECK(sec.parameter_bytes() == want_params);
    CHECK(sec.optimizer_state_bytes() == want_states);
}

}  // namespace

TEST_CASE(
    "ShardedEmbeddingCollection equals EmbeddingCollection: table_wise, column_wise, "
    "row_wise",
    "[distributed][mpi]") {
    const auto pg = world();
    for (const PlanKind kind : {PlanKind::kMixed, PlanKind::kRank0Empty}) {
        for (const auto optim : {kernels::OptimType::kSgd, kernels::OptimType::kExactAdagrad,
                                 kernels::OptimType::kAdam}) {
            INFO("plan " << plan_name(kind) << ", optimizer " << kernels::optim_type_name(optim));
            run(pg, make_plan(pg->size(), kind), optim);
        }
    }
    INFO("gradient division on");
    run(pg, make_plan(pg->size(), PlanKind::kMixed), kernels::OptimType::kExactAdagrad,
        {/*gradient_division=*/true});
}

TEST_CASE("ShardedEmbeddingCollection equals EmbeddingCollection: data_parallel",
          "[distributed][mpi]") {
    const auto pg = world();
    for (const PlanKind kind : {PlanKind::kDataParallel, PlanKind::kMixedDataParallel}) {
        for (const auto optim :
             {kernels::OptimType::kSgd, kernels::OptimType::kExactAdagrad,
              kernels::OptimType::kExactRowWiseAdagrad, kernels::OptimType::kAdam}) {
            // Row-wise Adagrad over several column shards differs from one process (header).
            if (kind == PlanKind::kMixedDataParallel &&
                optim == kernels::OptimType::kExactRowWiseAdagrad)
                continue;
            for (const bool exact : {true, false}) {
                INFO("plan " << plan_name(kind) << ", optimizer " << kernels::optim_type_name(optim)
                             << ", exact gradients " << exact);
                run(pg, make_plan(pg->size(), kind), optim, {false, exact});
            }
        }
    }
    // The gathered gradient is divided by the world size like the all-to-all's.
    INFO("gradient division on");
    run(pg, make_plan(pg->size(), PlanKind::kMixedDataParallel), kernels::OptimType::kAdam,
        {/*gradient_division=*/true});
    run(pg, make_plan(pg->size(), PlanKind::kDataParallel), kernels::OptimType::kExactAdagrad,
        {/*gradient_division=*/true});
}

TEST_CASE("ShardedEmbeddingCollection refuses what it cannot shard", "[distributed][mpi]") {
    const auto pg = world();
    const int world_size = pg->size();
    ShardingPlan plan = make_plan(world_size, PlanKind::kMixedDataParallel);
    const PlacementEnv env{world_size, world_size, "cpu"};
    plan.tables["t_rw"] =
        make_parameter_sharding(ShardingType::kTableRowWise, EmbeddingComputeKernel::kFused, 5,
                                kDim, all_ranks(world_size), {}, env);
    CHECK_THROWS_WITH(ShardedEmbeddingCollection(tables(), plan, pg, 1, {}),
                      Catch::Contains("table 't_rw' is planned table_row_wise") &&
                          Catch::Contains("sequence embeddings support data_parallel, table_wise, "
                                          "column_wise and row_wise"));
    auto mixed = tables();
    mixed[1].embedding_dim = 2;
    CHECK_THROWS_WITH(
        ShardedEmbeddingCollection(mixed, make_plan(world_size, PlanKind::kMixed), pg, 1, {}),
        Catch::Contains("must share embedding_dim"));
    // An id past its table fails on the rank that has it, before any collective.
    ShardedEmbeddingCollection sec(tables(), make_plan(world_size, PlanKind::kMixed), pg, 1, {});
    KeyedJaggedTensor bad = KeyedJaggedTensor::from_lengths_sync(
        {"f0", "f1", "f2", "f3", "f4"}, i64({0, 0, 0, 0, 5}), i64({1, 1, 1, 1, 1}));
    CHECK_THROWS_WITH(sec.forward(bad),
                      Catch::Contains("feature 'f4' id 5 is outside table 't_rw' of 5 rows"));
}
