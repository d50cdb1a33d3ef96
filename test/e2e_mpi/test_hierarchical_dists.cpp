// comm.hierarchical on the sharded collection, against the flat output dists with the model's own
// (random, non-dyadic) rows: table_row_wise gives bitwise the flat outputs and rows (its node sums
// are added in the flat order); row_wise adds its partial sums node by node, within f32 rounding
// of the flat sums. auto turns it on exactly where there is more than one node, and then fewer
// pooled bytes cross nodes. input_comm_bytes counts the ids each rank sends, as computed here
// from its batches. Nodes: SHARDREC_LOCAL_SIZE (test_e2e_mpi_np4_local2: two nodes of two).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "comm/mpi_env.h"
#include "comm/process_group.h"
#include "engine/config/config.h"
#include "engine/core/rng.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/distributed/sharding_plan.h"
#include "engine/modules/model.h"

using namespace shardrec;

namespace {

constexpr int64_t kBatch = 5;  // per rank

const char* const kModel = R"(
train: {steps: 3, seed: 5}
data: {type: synthetic, batch_size: 5}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [8]
  top_mlp: [4, 1]
  tables:
    - {name: a, num_embeddings: 41}
    - {name: b, num_embeddings: 29, pooling: mean}
    - {name: c, num_embeddings: 17}
)";

KeyedJaggedTensor make_batch(int step,
                             int64_t rank,
                             const std::vector<EmbeddingBagConfig>& tables) {
    std::vector<std::string> keys;
    std::vector<int64_t> lengths, values;
    for (size_t t = 0; t < tables.size(); ++t) {
        keys.push_back(tables[t].feature_names[0]);
        for (int64_t b = 0; b < kBatch; ++b) {
            const uint64_t h = rng::hash(7, static_cast<uint64_t>(step), t,
                                         static_cast<uint64_t>(rank * kBatch + b));
            const int64_t n = static_cast<int64_t>(h % 5);
            lengths.push_back(n);
            for (int64_t j = 0; j < n; ++j)
                values.push_back(
                    static_cast<int64_t>(rng::hash(h, static_cast<uint64_t>(j)) %
                                         static_cast<uint64_t>(tables[t].num_embeddings)));
        }
    }
    return KeyedJaggedTensor::from_lengths_sync(keys, Tensor::from_vector(values),
                                                Tensor::from_vector(lengths), std::nullopt, kBatch);
}

struct Run {
    std::vector<std::vector<float>> outputs;  // per step
    std::vector<std::vector<float>> rows;     // per table, the whole table after the steps
    CommBytes bytes;
    CommBytes ids;  // input_comm_bytes()
    ShardingPlan plan;
    bool hierarchical = false;
};

Run train(const std::string& sharding, HierarchicalMode mode) {
    auto pg = comm::world_process_group();
    const Config config = parse_config(std::string(kModel) + "sharding: " + sharding + "\n" +
                                           "optimizer: {sparse: {type: adagrad, "
                                           "learning_rate: 0.1}}\n",
                                       {});
    PlacementEnv env;
    env.world_size = pg->size();
    env.local_size = std::min(comm::process_info().local_size, pg->size());
    const ShardingPlan plan = manual_plan(config.model, config.sharding, env);
    const auto tables = embedding_bag_configs(config.model);
    ShardedEmbeddingBagCollection ebc(tables, false, plan, pg, 5,
                                      sparse_optimizer_params(config.optimizer.sparse),
                                      Device::cpu(), nullptr, QCommsConfig{}, "", nullptr, mode);
    Run run;
    run.hierarchical = ebc.hierarchical();
    for (int step = 0; step < 3; ++step) {
        const Tensor out = ebc.forward(make_batch(step, pg->rank(), tables)).values();
        run.outputs.emplace_back(out.data<float>(), out.data<float>() + out.numel());
        std::vector<float> g(static_cast<size_t>(out.numel()));
        for (size_t i = 0; i < g.size(); ++i)
            g[i] = static_cast<float>(rng::uniform(3, static_cast<uint64_t>(step), i)) - 0.5f;
        ebc.backward(Tensor::from_vector(g, {out.size(0), out.size(1)}));
    }
    for (int64_t t = 0; t < static_cast<int64_t>(tables.size()); ++t) {
        const Tensor w = ebc.unsharded_weight(t);
        run.rows.emplace_back(w.data<float>(), w.data<float>() + w.numel());
    }
    run.bytes = ebc.pooled_comm_bytes();
    run.ids = ebc.input_comm_bytes();
    run.plan = plan;
    return run;
}

float world_sum(int64_t v) {
    Tensor t = Tensor::from_vector<float>({static_cast<float>(v)});
    comm::world_process_group()->all_reduce(t, comm::ReduceOp::kSum).wait();
    return t.data<float>()[0];
}

}  // namespace

TEST_CASE("comm.hierarchical: table_row_wise bitwise the flat output dists", "[mpi][e2e]") {
    const Run flat = train("{sharding_type: table_row_wise}", HierarchicalMode::kOff);
    const Run hier = train("{sharding_type: table_row_wise}", HierarchicalMode::kOn);
    REQUIRE(hier.hierarchical);
    REQUIRE(!flat.hierarchical);
    for (size_t s = 0; s < flat.outputs.size(); ++s)
        CHECK(std::memcmp(flat.outputs[s].data(), hier.outputs[s].data(),
                          flat.outputs[s].size() * sizeof(float)) == 0);
    for (size_t t = 0; t < flat.rows.size(); ++t)
        CHECK(std::memcmp(flat.rows[t].data(), hier.rows[t].data(),
                          flat.rows[t].size() * sizeof(float)) == 0);
}

TEST_CASE("comm.hierarchical: row_wise and a mixed plan within f32 rounding of flat",
          "[mpi][e2e]") {
    const int world = comm::world_process_group()->size();
    for (const char* sharding :
         {"{sharding_type: row_wise}",
          "{sharding_type: table_wise, tables: [{name: a, sharding_type: row_wise}, "
          "{name: b, sharding_type: table_row_wise}]}"}) {
        const Run flat = train(sharding, HierarchicalMode::kOff);
        const Run hier = train(sharding, HierarchicalMode::kOn);
        INFO(sharding);
        for (size_t s = 0; s < flat.outputs.size(); ++s) {
            for (size_t i = 0; i < flat.outputs[s].size(); ++i)
                CHECK(hier.outputs[s][i] ==
                      Approx(flat.outputs[s][i]).epsilon(world * 0x1p-21).margin(1e-6));
        }
        for (size_t t = 0; t < flat.rows.size(); ++t) {
            for (size_t i = 0; i < flat.rows[t].size(); ++i)
                CHECK(hier.rows[t][i] == Approx(flat.rows[t][i]).epsilon(1e-5).margin(1e-6));
        }
    }
}

TEST_CASE("comm.hierarchical auto: on with several nodes, fewer bytes cross nodes", "[mpi][e2e]") {
    const int world = comm::world_process_group()->size();
    const int local = std::min(comm::process_info().local_size, world);
    const Run flat = train("{sharding_type: row_wise}", HierarchicalMode::kOff);
    const Run automatic = train("{sharding_type: row_wise}", HierarchicalMode::kAuto);
    CHECK(automatic.hierarchical == (local > 1 && world > local));
    if (!automatic.hierarchical)
        return;
    // Every node sends one sum per node pair: local times fewer bytes.
    CHECK(world_sum(automatic.bytes.forward_cross_node) * static_cast<float>(local) ==
          world_sum(flat.bytes.forward_cross_node));
    CHECK(world_sum(automatic.bytes.backward_cross_node) * static_cast<float>(local) ==
          world_sum(flat.bytes.backward_cross_node));
}

TEST_CASE("ShardedEmbeddingBagCollection: input_comm_bytes counts the ids sent to other ranks",
          "[mpi][e2e]") {
    const auto pg = comm::world_process_group();
    const int world = pg->size(), me = pg->rank();
    const int local = std::min(comm::process_info().local_size, world);
    const auto tables = embedding_bag_configs(parse_config(kModel, {}).model);
    for (const char* sharding : {"{sharding_type: table_wise}", "{sharding_type: row_wise}"}) {
        INFO(sharding);
        const Run run = train(sharding, HierarchicalMode::kOff);
        // What this rank's 3 batches send to each other rank: table_wise, a key's lengths and
        // ids to its table's rank; row_wise, every key's lengths to every rank and each id to
        // the rank of its row block (8 bytes each, no weights).
        int64_t want = 0, want_cross = 0;
        for (int step = 0; step < 3; ++step) {
            const KeyedJaggedTensor kjt = make_batch(step, me, tables);
            for (size_t t = 0; t < tables.size(); ++t) {
                const ParameterSharding& ps = run.plan.at(tables[t].name);
                const JaggedTensor bags = kjt[tables[t].feature_names[0]];
                const int64_t* ids = bags.values().data<int64_t>();
                for (int r = 0; r < world; ++r) {
                    if (r == me)
                        continue;
                    int64_t bytes = 0;
                    if (ps.sharding_type == ShardingType::kTableWise) {
                        if (ps.ranks[0] == r)
                            bytes = 8 * (kBatch + bags.values().numel());
                    } else {
                        const int64_t block = (tables[t].num_embeddings + world - 1) / world;
                        bytes = 8 * kBatch;
                        for (int64_t i = 0; i < bags.values().numel(); ++i)
                            bytes += ids[i] / block == r ? 8 : 0;
                    }
                    want += bytes;
                    want_cross += r / local != me / local ? bytes : 0;
                }
            }
        }
        CHECK(run.ids.forward == want);
        CHECK(run.ids.forward_cross_node == want_cross);
        CHECK(run.ids.backward == 0);
    }
}
