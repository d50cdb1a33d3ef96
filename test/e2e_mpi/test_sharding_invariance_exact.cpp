// Sharding invariance in exact mode (STYLE.md R3): ids weights are small integers, rows start on a
// dyadic grid (k/8), the gradient that reaches the pooled embeddings is dyadic (k/4, from seeds,
// as if from a loss linear in them), MEAN bags hold 0, 1, 2 or 4 ids and the world size is a
// power of two. Then every float sum of the forward and of the backward is exact whatever its
// order, so the sharded collection must give BITWISE the pooled outputs, rows and fused optimizer
// state of one unsharded EmbeddingBagCollection fed the global batch, for every sharding type,
// a mixed plan and each fused optimizer. Each rank builds that reference itself (no collective).
//
// SGD with a power-of-two learning rate keeps the rows on the grid, so every step is exact.
// Adagrad, row-wise Adagrad and Adam leave it after their first update: the gradients they consume
// stay exact (they come from seeds, not from the outputs), so rows and state stay bitwise equal,
// but the pooled outputs after the first update sum rounded values in shard order (row_wise partial
// sums) and are checked against the summation bound instead.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "comm/mpi_env.h"
#include "comm/process_group.h"
#include "engine/config/config.h"
#include "engine/core/rng.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/distributed/sharding_plan.h"
#include "engine/modules/embedding_bag_collection.h"
#include "engine/modules/model.h"

using namespace shardrec;

namespace {

constexpr uint64_t kSeed = 23;
constexpr int64_t kBatch = 4;  // per rank
constexpr int kSteps = 4;

// Rows that do not divide by 3 or 4, a MEAN table, a table shared by two features and a table with
// fewer rows than ranks (the models need one dim; column splits are uneven).
const char* const kModel = R"(
train: {steps: 4, seed: 23}
data: {type: synthetic, batch_size: 4}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [8]
  top_mlp: [4, 1]
  tables:
    - {name: big, num_embeddings: 37}
    - {name: avg, num_embeddings: 13, pooling: mean}
    - {name: shared, num_embeddings: 11, feature_names: [s1, s2]}
    - {name: tiny, num_embeddings: 3}
)";

struct Setup {
    std::string sharding;   // the YAML of the sharding section
    std::string optimizer;  // sgd | adagrad | rowwise_adagrad | adam
    bool weighted = true;
    std::string cache;  // "": rows in memory; else key_value tables with this sharding.cache
    HierarchicalMode hierarchical = HierarchicalMode::kOff;  // comm.hierarchical
};

constexpr const char* kStorage = "/tmp/shardrec-test-exact-kv";

Config make_config(const Setup& s) {
    std::string sharding = s.sharding;
    if (!s.cache.empty()) {
        sharding = "{compute_kernel: key_value, storage: {path: " + std::string(kStorage) +
                   "}, cache: " + s.cache + ", " + sharding.substr(1);
    }
    std::string text = std::string(kModel) + "sharding: " + sharding + "\n" +
                       "optimizer: {sparse: {type: " + s.optimizer + ", learning_rate: 0.125" +
                       (s.optimizer == "sgd" ? "" : ", eps: 0.0625") + "}}\n";
    return parse_config(text, {});
}

// Dyadic k/den with k uniform in [-n, n], from (seed, a, b, c).
float dyadic(int n, float den, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    const uint64_t h = rng::hash(kSeed ^ d, a, b, c);
    return static_cast<float>(static_cast<int64_t>(h % static_cast<uint64_t>(2 * n + 1)) - n) / den;
}

// Samples [first, first + count) of the global batch of `step`: lengths 0..3 (MEAN: 0, 1, 2, 4),
// ids with a hot row 0, integer weights 1..3.
KeyedJaggedTensor make_batch(const std::vector<EmbeddingBagConfig>& tables,
                             bool weighted,
                             int step,
                             int64_t first,
                             int64_t count) {
    std::vector<std::string> keys;
    std::vector<int64_t> lengths, values;
    std::vector<float> weights;
    uint64_t f = 0;
    for (const auto& table : tables) {
        for (const auto& name : table.feature_names) {
            keys.push_back(name);
            for (int64_t g = first; g < first + count; ++g) {
                const uint64_t h =
                    rng::hash(kSeed, static_cast<uint64_t>(step), f, static_cast<uint64_t>(g));
                int64_t n = static_cast<int64_t>(h % 4);
                if (table.pooling == PoolingMode::kMean && n == 3)
                    n = 4;
                lengths.push_back(n);
                for (int64_t j = 0; j < n; ++j) {
                    const uint64_t id_bits = rng::hash(kSeed + 1, h, static_cast<uint64_t>(j));
                    values.push_back(
                        id_bits % 3 == 0
                            ? 0
                            : static_cast<int64_t>((id_bits >> 8) %
                                                   static_cast<uint64_t>(table.num_embeddings)));
                    weights.push_back(static_cast<float>(1 + (id_bits >> 40) % 3));
                }
            }
            ++f;
        }
    }
    std::optional<Tensor> w;
    if (weighted)
        w = Tensor::from_vector(weights);
    return KeyedJaggedTensor::from_lengths_sync(keys, Tensor::from_vector(values),
                                                Tensor::from_vector(lengths), w, count);
}

// d loss / d pooled [count, sum D] for global samples [first, +count), times `scale`.
Tensor make_grad(int64_t width, int step, int64_t first, int64_t count, float scale) {
    std::vector<float> g(static_cast<size_t>(count * width));
    for (int64_t b = 0; b < count; ++b) {
        for (int64_t c = 0; c < width; ++c) {
            g[static_cast<size_t>(b * width + c)] =
                scale * dyadic(4, 4.0f, static_cast<uint64_t>(step),
                               static_cast<uint64_t>(first + b), static_cast<uint64_t>(c), 2);
        }
    }
    return Tensor::from_vector(g, {count, width});
}

std::vector<int64_t> all_rows(int64_t rows) {
    std::vector<int64_t> out(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
        out[static_cast<size_t>(r)] = r;
    return out;
}

// The shard's rows and optimizer state as tensors: views, or a key_value shard's read through
// its store after a flush.
std::pair<Tensor, std::vector<Tensor>> shard_tensors(const EmbeddingShardState& s) {
    if (s.cached == nullptr)
        return {s.weight, s.optimizer_state};
    s.cached->flush();
    std::pair<Tensor, std::vector<Tensor>> out;
    s.cached->read_rows(all_rows(s.rows), out.first, out.second);
    return out;
}

// Every row of every table on the grid k/8, element (table, row, col) from seeds.
void set_dyadic_rows(EmbeddingBagCollectionInterface& ebc) {
    for (EmbeddingShardState& s : ebc.shard_states()) {
        auto [weight, states] = shard_tensors(s);
        float* w = weight.data<float>();
        for (int64_t r = 0; r < s.rows; ++r) {
            for (int64_t c = 0; c < s.cols; ++c) {
                w[r * s.cols + c] = dyadic(8, 8.0f, static_cast<uint64_t>(s.table),
                                           static_cast<uint64_t>(s.row_offset + r),
                                           static_cast<uint64_t>(s.col_offset + c), 3);
            }
        }
        if (s.cached != nullptr) {
            s.cached->reset();
            s.cached->write_rows(all_rows(s.rows), weight, states);
        }
    }
}

void require_bitwise(const float* got, const float* want, int64_t n, const std::string& what) {
    for (int64_t i = 0; i < n; ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            INFO(what << " [" << i << "]: sharded " << got[i] << " one process " << want[i]);
            REQUIRE(false);
        }
    }
}

// Outputs after rows left the grid: each is a sum of at most 4 ids * weight 3 rounded terms,
// summed in another order, so |diff| <= (K + 1) * 2^-24 * sum|terms|; rows stay below 8 after a
// few steps of lr 1/8, so 4 * 3 * 8 * 5 * 2^-24 < 3e-5 bounds it.
void require_close(const float* got, const float* want, int64_t n, const std::string& what) {
    for (int64_t i = 0; i < n; ++i) {
        INFO(what << " [" << i << "]: sharded " << got[i] << " one process " << want[i]);
        REQUIRE(std::fabs(got[i] - want[i]) <= 3e-5);
    }
}

// The sharded shard's rows and state against the same slice of the reference table.
void require_shard_equal(const EmbeddingShardState& s,
                         EmbeddingBagCollection& ref,
                         bool compare_state,
                         const std::string& what) {
    const EmbeddingShardState r = ref.shard_states()[static_cast<size_t>(s.table)];
    const auto slice_equal = [&](const Tensor& got, const Tensor& want, const std::string& name) {
        const bool per_row = got.dim() == 1;
        const int64_t cols = per_row ? 1 : s.cols, want_cols = per_row ? 1 : r.cols;
        for (int64_t row = 0; row < s.rows; ++row) {
            require_bitwise(got.data<float>() + row * cols,
                            want.data<float>() + (s.row_offset + row) * want_cols +
                                (per_row ? 0 : s.col_offset),
                            cols, what + " " + name + " row " + std::to_string(s.row_offset + row));
        }
    };
    const auto [weight, states] = shard_tensors(s);
    slice_equal(weight, r.weight, "weight");
    if (!compare_state)
        return;
    REQUIRE(states.size() == r.optimizer_state.size());
    for (size_t i = 0; i < states.size(); ++i)
        slice_equal(states[i], r.optimizer_state[i], "state" + std::to_string(i));
}

// Trains the sharded collection and the one-process reference side by side for kSteps.
void check_exact(const Setup& setup) {
    auto pg = comm::world_process_group();
    const int world = pg->size(), me = pg->rank();
    const Config config = make_config(setup);
    PlacementEnv env;
    env.world_size = world;
    env.local_size = std::min(comm::process_info().local_size, world);
    const ShardingPlan plan = manual_plan(config.model, config.sharding, env);
    const auto tables = embedding_bag_configs(config.model);
    const auto optim = sparse_optimizer_params(config.optimizer.sparse);

    ShardedEmbeddingBagCollection sharded(
        tables, setup.weighted, plan, pg, kSeed, optim, Device::cpu(), nullptr, QCommsConfig{},
        config.sharding.storage.path, nullptr, setup.hierarchical);
    EmbeddingBagCollection ref(tables, setup.weighted, kSeed, optim);
    set_dyadic_rows(sharded);
    set_dyadic_rows(ref);
    const bool exact_outputs = optim.type == kernels::OptimType::kSgd;
    // Row-wise Adagrad keeps one accumulator per column shard (see the sharded EBC's header).
    bool compare_state = optim.type != kernels::OptimType::kExactRowWiseAdagrad;
    for (const auto& [name, ps] : plan.tables) {
        if (ps.sharding_type != ShardingType::kColumnWise || ps.sharding_spec.size() == 1)
            continue;
        compare_state = false;
    }
    const std::string what = setup.optimizer + " " + setup.sharding + " " + setup.cache;
    for (int step = 0; step < kSteps; ++step) {
        const KeyedJaggedTensor local =
            make_batch(tables, setup.weighted, step, me * kBatch, kBatch);
        const KeyedJaggedTensor global =
            make_batch(tables, setup.weighted, step, 0, world * kBatch);
        const Tensor got = sharded.forward(local).values().clone();
        const Tensor want = ref.forward(global).values();
        const int64_t width = got.size(1);
        const std::string at = what + " step " + std::to_string(step) + " pooled";
        if (exact_outputs || step == 0) {
            require_bitwise(got.data<float>(), want.data<float>() + me * kBatch * width,
                            kBatch * width, at);
        } else {
            require_close(got.data<float>(), want.data<float>() + me * kBatch * width,
                          kBatch * width, at);
        }
        // One process averages over the global batch; each rank's backward collectives divide
        // by the world size (TorchRec), so the reference gets the same gradient divided by it.
        sharded.backward(make_grad(width, step, me * kBatch, kBatch, 1.0f));
        ref.backward(make_grad(width, step, 0, world * kBatch, 1.0f / static_cast<float>(world)));
        for (const EmbeddingShardState& s : sharded.shard_states()) {
            require_shard_equal(s, ref, compare_state,
                                at + " table " + tables[static_cast<size_t>(s.table)].name);
        }
    }
    for (int64_t t = 0; t < static_cast<int64_t>(tables.size()); ++t) {
        const Tensor full = sharded.unsharded_weight(t);
        require_bitwise(full.data<float>(), ref.weight(t).data<float>(), full.numel(),
                        what + " unsharded table " + tables[static_cast<size_t>(t)].name);
    }
}

// The plans under test. column_wise splits `big` unevenly (3 + 5 columns) where there are ranks
// for two shards. The first mixed plan uses every type at once; the second leaves every rank but
// the first and the last without a table. With one_column_shard, every column_wise table is one
// shard (row-wise Adagrad is invariant only then; see the last test case).
std::vector<std::string> shardings(int world, bool one_column_shard) {
    const std::string last = std::to_string(world - 1);
    const auto cw = [&](const std::string& table, const std::string& widths) {
        if (world == 1 || one_column_shard) {
            return "{name: " + table + ", sharding_type: column_wise, ranks: [" + last +
                   "], column_widths: [8]}";
        }
        return "{name: " + table + ", sharding_type: column_wise, ranks: [" + last +
               ", 0], column_widths: [" + widths + "]}";
    };
    return {
        "{sharding_type: table_wise}",
        "{sharding_type: row_wise}",
        "{sharding_type: column_wise, tables: [" + cw("big", "3, 5") + ", " + cw("avg", "1, 7") +
            ", " + cw("shared", "6, 2") + ", " + cw("tiny", "4, 4") + "]}",
        "{sharding_type: table_row_wise}",
        "{sharding_type: data_parallel}",
        "{sharding_type: table_wise, tables: [{name: big, sharding_type: row_wise}, " +
            cw("avg", "1, 7") +
            ", {name: shared, sharding_type: table_row_wise}, "
            "{name: tiny, sharding_type: data_parallel}]}",
        "{sharding_type: table_wise, tables: [{name: big, sharding_type: table_wise, ranks: "
        "[0]}, " +
            cw("avg", "1, 7") +
            ", {name: shared, sharding_type: table_wise, ranks: [0]}, "
            "{name: tiny, sharding_type: table_wise, ranks: [0]}]}",
    };
}

}  // namespace

TEST_CASE("sharding invariance, exact mode: sgd, bitwise for every type", "[mpi][e2e]") {
    const int world = comm::world_process_group()->size();
    for (const std::string& sharding : shardings(world, false)) {
        for (bool weighted : {true, false})
            check_exact({sharding, "sgd", weighted, ""});
    }
}

TEST_CASE("sharding invariance, exact mode: every fused optimizer under every type", "[mpi][e2e]") {
    const int world = comm::world_process_group()->size();
    for (const char* optimizer : {"adagrad", "rowwise_adagrad", "adam"}) {
        const bool one_column_shard = std::string(optimizer) == "rowwise_adagrad";
        for (const std::string& sharding : shardings(world, one_column_shard))
            check_exact({sharding, optimizer, true, ""});
    }
}

// comm.hierarchical (the row-sharded output dists in two steps; nodes of SHARDREC_LOCAL_SIZE
// ranks, test_e2e_mpi_np4_local2): bitwise too, for every type and a mixed plan.
TEST_CASE("sharding invariance, exact mode: hierarchical output dists", "[mpi][e2e]") {
    const int world = comm::world_process_group()->size();
    const std::vector<std::string> plans = shardings(world, false);
    for (const size_t plan : {1, 3, 5})  // row_wise, table_row_wise, mixed
        check_exact({plans[plan], "sgd", true, "", HierarchicalMode::kOn});
}

// key_value tables: the rows on disk behind a DRAM cache from one slot (every batch overflows)
// to every row, LRU and LFU, give the same bits as rows in memory for every sharding type and
// optimizer (engine/modules/cached_embedding_shard.h).
TEST_CASE("sharding invariance, exact mode: key_value tables with any cache", "[mpi][e2e]") {
    const int world = comm::world_process_group()->size();
    for (const char* optimizer : {"sgd", "adagrad", "rowwise_adagrad", "adam"}) {
        const bool one_column_shard = std::string(optimizer) == "rowwise_adagrad";
        const std::vector<std::string> plans = shardings(world, one_column_shard);
        for (const char* cache :
             {"{load_factor: 0.01, algorithm: lru}", "{load_factor: 0.3, algorithm: lfu}",
              "{load_factor: 1.0, algorithm: lru}"}) {
            for (const size_t plan : {0, 1, 2, 3, 6}) {  // every type but data_parallel
                check_exact({plans[plan], optimizer, plan % 2 == 0, cache});
            }
        }
    }
}

// The documented exception (sharded_embedding_bag_collection.h): under column_wise, row-wise
// Adagrad keeps one accumulator per row of each column shard, the mean of g^2 over that shard's
// columns, as TorchRec does, so the update depends on the column split. The aggregated gradient g
// comes from an SGD run with learning rate 1 (exact: w0 - w1).
TEST_CASE("column_wise with row-wise Adagrad keeps one accumulator per column shard",
          "[mpi][e2e]") {
    auto pg = comm::world_process_group();
    const int world = pg->size(), me = pg->rank();
    const Setup setup{shardings(world, false)[2], "rowwise_adagrad", true, ""};
    const Config config = make_config(setup);
    PlacementEnv env;
    env.world_size = world;
    env.local_size = std::min(comm::process_info().local_size, world);
    const ShardingPlan plan = manual_plan(config.model, config.sharding, env);
    const auto tables = embedding_bag_configs(config.model);
    const auto optim = sparse_optimizer_params(config.optimizer.sparse);
    kernels::FusedOptimizerParams sgd;
    sgd.type = kernels::OptimType::kSgd;
    sgd.learning_rate = 1.0f;

    ShardedEmbeddingBagCollection sharded(tables, true, plan, pg, kSeed, optim);
    EmbeddingBagCollection full_rows(tables, true, kSeed, optim);
    EmbeddingBagCollection gradient(tables, true, kSeed, sgd);
    for (EmbeddingBagCollectionInterface* ebc :
         std::initializer_list<EmbeddingBagCollectionInterface*>{&sharded, &full_rows, &gradient})
        set_dyadic_rows(*ebc);
    const KeyedJaggedTensor local = make_batch(tables, true, 0, me * kBatch, kBatch);
    const KeyedJaggedTensor global = make_batch(tables, true, 0, 0, world * kBatch);
    const int64_t width = sharded.forward(local).values().size(1);
    full_rows.forward(global);
    std::vector<Tensor> w0;
    for (const EmbeddingShardState& s : gradient.shard_states())
        w0.push_back(s.weight.clone());
    gradient.forward(global);
    const float inv_world = 1.0f / static_cast<float>(world);
    sharded.backward(make_grad(width, 0, me * kBatch, kBatch, 1.0f));
    full_rows.backward(make_grad(width, 0, 0, world * kBatch, inv_world));
    gradient.backward(make_grad(width, 0, 0, world * kBatch, inv_world));

    bool split_differs = false;
    for (const EmbeddingShardState& s : sharded.shard_states()) {
        const Tensor g_after = gradient.shard_states()[static_cast<size_t>(s.table)].weight;
        const Tensor& g_before = w0[static_cast<size_t>(s.table)];
        const Tensor full_state =
            full_rows.shard_states()[static_cast<size_t>(s.table)].optimizer_state.at(0);
        const int64_t D = g_after.size(1);
        REQUIRE(s.optimizer_state.size() == 1);
        REQUIRE(s.optimizer_state[0].dim() == 1);
        for (int64_t r = 0; r < s.rows; ++r) {
            const int64_t row = s.row_offset + r;
            float sum_sq = 0.0f;  // exact: dyadic gradients
            for (int64_t c = s.col_offset; c < s.col_offset + s.cols; ++c) {
                const float g =
                    g_before.data<float>()[row * D + c] - g_after.data<float>()[row * D + c];
                sum_sq += g * g;
            }
            const float want = sum_sq / static_cast<float>(s.cols);
            const float got = s.optimizer_state[0].data<float>()[r];
            INFO("table " << tables[static_cast<size_t>(s.table)].name << " row " << row
                          << " columns [" << s.col_offset << ", +" << s.cols << "): accumulator "
                          << got << ", mean of g^2 over the shard's columns " << want);
            REQUIRE(std::memcmp(&got, &want, sizeof(float)) == 0);
            if (s.cols != D && got != full_state.data<float>()[row])
                split_differs = true;
        }
    }
    // With two shards per table (and touched rows with different gradients in the two halves)
    // the accumulators are not those of the full rows: not invariant to the split.
    if (world >= 2 && me == 0)
        CHECK(split_differs);
}
