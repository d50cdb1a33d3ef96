// Pipelines agree (ARCHITECTURE.md): TrainPipelineSparseDist gives TrainPipelineBase's numbers
// bitwise (losses, every table row, every dense parameter, eval metrics), here with every dist
// path in one plan, position-weighted features, an evaluation while the sparse-dist pipeline holds
// two batches, and the last two steps drained. Each rank runs both pipelines side by side on the
// same process group; and with a managed-collision table, remapped ahead of training. Also: the
// sparse-dist pipeline's queue depth and its per-stage times.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include "comm/process_group.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using namespace shardrec;

namespace {

const char* const kConfig = R"(
train: {steps: 7, seed: 11, log_every: 10, eval_samples: 64}
data: {type: synthetic, batch_size: 6}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  tables:
    - {name: big, num_embeddings: 301, pooling_factor: 2}
    - {name: avg, num_embeddings: 97, pooling: mean, pooling_factor: 3}
    - {name: wtd, num_embeddings: 50, weighted: true, pooling_factor: 0.7}
    - {name: shared, num_embeddings: 41, feature_names: [s1, s2], position_weights: 3}
    - {name: cols, num_embeddings: 23}
optimizer:
  dense: {type: adagrad, learning_rate: 0.05}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
sharding:
  sharding_type: table_wise
  tables:
    - {name: big, sharding_type: row_wise}
    - {name: avg, sharding_type: table_row_wise}
    - {name: wtd, sharding_type: data_parallel}
    - {name: cols, sharding_type: column_wise}
)";

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, sizeof(float)) == 0;
}

void require_same_tensor(const Tensor& got, const Tensor& want, const std::string& what) {
    REQUIRE(got.numel() == want.numel());
    const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) {
        INFO(what << " [" << i << "]: sparse_dist " << g[i] << " base " << w[i]);
        REQUIRE(same_bits(g[i], w[i]));
    }
}

void require_same_metrics(const train::Metrics& a, const train::Metrics& b) {
    CHECK(a.count == b.count);
    CHECK(a.auc == b.auc);
    CHECK(a.loss == b.loss);
    CHECK(a.accuracy == b.accuracy);
}

// Trains every step of `config` on `pipeline`, evaluating after step `eval_after` (1-based):
// while the pipeline holds the next batches, or, with managed-collision tables (whose remap has
// run for the batches it holds), once it has trained the inputs of the steps before.
std::vector<float> train_all(train::Trainer& trainer,
                             const Config& config,
                             int64_t eval_after,
                             train::Metrics& mid_eval) {
    const bool managed = !trainer.managed_collision().empty();
    std::vector<float> losses;
    const auto train = [&](int64_t first, int64_t end) {
        auto inputs = trainer.train_inputs(first, end);
        while (const std::optional<train::TrainOutput> out = trainer.progress(*inputs)) {
            REQUIRE(out->step == static_cast<int64_t>(losses.size()));
            losses.push_back(out->result.loss);
            if (!managed && out->step + 1 == eval_after) {
                const std::string& pipeline = trainer.config().train.pipeline;
                CHECK(trainer.num_queued() == (pipeline == "base"          ? 0
                                               : pipeline == "sparse_dist" ? 2
                                                                           : 3));
                mid_eval = trainer.evaluate();
            }
        }
        REQUIRE(!trainer.progress(*inputs));  // exhausted stays exhausted
    };
    if (managed) {
        train(0, eval_after);
        mid_eval = trainer.evaluate();
        train(eval_after, config.train.steps);
    } else {
        train(0, config.train.steps);
    }
    return losses;
}

// key_value tables whose caches hold 10 % of the rows (most batches evict and overflow).
const std::vector<std::string> kKeyValue = {"sharding.compute_kernel=key_value",
                                            "sharding.storage.path=/tmp/shardrec-test-pipelines",
                                            "sharding.cache.load_factor=0.1"};

// Table big managed (row_wise, two buckets): 16 slots and 284 residual rows for a vocabulary
// that grows by a raw id every 2 samples, an eviction pass every step, so that most steps'
// remaps run while the step before still trains, some of them evicting its rows.
const std::vector<std::string> kManaged = {"model.tables[0].num_embeddings=300",
                                           "model.tables[0].managed_collision.zch_size=16",
                                           "model.tables[0].managed_collision.mch_size=284",
                                           "model.tables[0].managed_collision.eviction_interval=1",
                                           "model.tables[0].managed_collision.total_num_buckets=2",
                                           "data.synthetic.raw_id_drift=2"};

std::vector<std::string> with(std::vector<std::string> sets, const std::string& pipeline) {
    sets.push_back("train.pipeline=" + pipeline);
    return sets;
}

void check_pipelines_agree(const std::shared_ptr<comm::ProcessGroup>& pg,
                           const std::string& pipeline = "sparse_dist",
                           const std::vector<std::string>& sets = {}) {
    const Config base_config = parse_config(kConfig, with(sets, "base"));
    const Config dist_config = parse_config(kConfig, with(sets, pipeline));
    train::Trainer base(base_config, pg);
    train::Trainer dist(dist_config, pg);

    train::Metrics base_mid, dist_mid;
    const std::vector<float> base_losses = train_all(base, base_config, 3, base_mid);
    const std::vector<float> dist_losses = train_all(dist, dist_config, 3, dist_mid);
    REQUIRE(dist_losses.size() == static_cast<size_t>(base_config.train.steps));
    REQUIRE(base_losses.size() == dist_losses.size());
    for (size_t s = 0; s < base_losses.size(); ++s) {
        INFO("step " << s + 1 << ": sparse_dist " << dist_losses[s] << " base " << base_losses[s]);
        CHECK(same_bits(dist_losses[s], base_losses[s]));
    }
    require_same_metrics(dist_mid, base_mid);
    require_same_metrics(dist.evaluate(), base.evaluate());
    if (!base.managed_collision().empty()) {
        const auto base_records = base.managed_collision().take_records();
        const auto dist_records = dist.managed_collision().take_records();
        REQUIRE(dist_records.size() == base_records.size());
        int64_t evictions = 0;
        for (size_t i = 0; i < base_records.size(); ++i) {
            CHECK(dist_records[i].step == base_records[i].step);
            CHECK(dist_records[i].evictions == base_records[i].evictions);
            CHECK(dist_records[i].hit_fraction == base_records[i].hit_fraction);
            evictions += base_records[i].evictions;
        }
        CHECK(evictions > 0);
    }

    const std::vector<Parameter*> bp = base.model().parameters();
    const std::vector<Parameter*> dp = dist.model().parameters();
    REQUIRE(bp.size() == dp.size());
    for (size_t i = 0; i < bp.size(); ++i)
        require_same_tensor(dp[i]->value, bp[i]->value, "dense parameter " + std::to_string(i));
    const int64_t num_tables = static_cast<int64_t>(base_config.model.tables.size());
    if (pg != nullptr) {
        auto& b = dynamic_cast<ShardedEmbeddingBagCollection&>(base.model().sparse_arch());
        auto& d = dynamic_cast<ShardedEmbeddingBagCollection&>(dist.model().sparse_arch());
        for (int64_t t = 0; t < num_tables; ++t)
            require_same_tensor(d.unsharded_weight(t), b.unsharded_weight(t),
                                "table " + std::to_string(t));
    } else {
        auto& b = dynamic_cast<EmbeddingBagCollection&>(base.model().sparse_arch());
        auto& d = dynamic_cast<EmbeddingBagCollection&>(dist.model().sparse_arch());
        for (int64_t t = 0; t < num_tables; ++t)
            require_same_tensor(d.weight(t), b.weight(t), "table " + std::to_string(t));
    }
}

}  // namespace

TEST_CASE("pipelines agree: sharded over every rank, every dist path", "[mpi][e2e]") {
    check_pipelines_agree(comm::world_process_group());
}

// The prefetch pipeline fills batch i+1's cache rows while batch i trains; an evaluation in
// between refills them.
TEST_CASE("pipelines agree: prefetch_sparse_dist with key_value tables", "[mpi][e2e]") {
    const test::ExpectLogs fill_thread_shares_a_core;  // mpirun binds each rank to one core
    check_pipelines_agree(comm::world_process_group(), "prefetch_sparse_dist", kKeyValue);
}

// 2D: a replica's backward brings the rows the other replicas' batches touched into its cache
// while the fill thread places batch i+1's rows beside them.
TEST_CASE("pipelines agree: prefetch_sparse_dist with key_value tables in replica groups",
          "[mpi][e2e][even_ranks]") {
    const test::ExpectLogs fill_thread_shares_a_core;  // mpirun binds each rank to one core
    std::vector<std::string> sets = kKeyValue;
    sets.push_back("sharding.replica_groups=2");
    check_pipelines_agree(comm::world_process_group(), "prefetch_sparse_dist", sets);
}

// A managed-collision table's remap runs when the pipeline takes a batch, two steps ahead of
// its training; the rows it evicts are reset just before that batch trains.
TEST_CASE("pipelines agree: a managed-collision table, remapped ahead", "[mpi][e2e]") {
    // At 4 ranks the two buckets live on 2 of the 4 ranks holding the rows, said at start.
    const test::ExpectLogs remap_on_two_ranks;
    check_pipelines_agree(comm::world_process_group(), "sparse_dist", kManaged);
}

// With key_value tables the prefetch pipeline fills batch i+1's rows while batch i trains, and
// batch i+1's resets then come in the caches or the stores. Here the managed table filters the
// ids it admits too (its slots' uses count only if the filter admits them).
TEST_CASE("pipelines agree: prefetch_sparse_dist with key_value tables and a managed one",
          "[mpi][e2e]") {
    const test::ExpectLogs fill_thread_shares_a_core;  // mpirun binds each rank to one core
    std::vector<std::string> sets = kKeyValue;
    sets.insert(sets.end(), kManaged.begin(), kManaged.end());
    sets.push_back("model.tables[0].managed_collision.threshold=probabilistic:0.5");
    check_pipelines_agree(comm::world_process_group(), "prefetch_sparse_dist", sets);
}

TEST_CASE("pipelines agree: one process, unsharded tables", "[mpi][e2e]") {
    check_pipelines_agree(nullptr);
}

TEST_CASE("TrainPipelineSparseDist: holds two steps ahead, then drains", "[mpi][e2e]") {
    const Config config = parse_config(kConfig, {"train.pipeline=sparse_dist"});
    train::Trainer trainer(config, comm::world_process_group());
    auto inputs = trainer.train_inputs(0, 4);
    std::vector<int64_t> queued;
    while (const auto out = trainer.progress(*inputs))
        queued.push_back(trainer.num_queued());
    CHECK(queued == std::vector<int64_t>{2, 2, 1, 0});
}

TEST_CASE("TrainPipelineSparseDist with prefetch: holds three steps ahead, then drains",
          "[mpi][e2e]") {
    const Config config = parse_config(kConfig, with(kKeyValue, "prefetch_sparse_dist"));
    const test::ExpectLogs fill_thread_shares_a_core;  // mpirun binds each rank to one core
    train::Trainer trainer(config, comm::world_process_group());
    auto inputs = trainer.train_inputs(0, 5);
    std::vector<int64_t> queued;
    while (const auto out = trainer.progress(*inputs))
        queued.push_back(trainer.num_queued());
    CHECK(queued == std::vector<int64_t>{3, 3, 2, 1, 0});
    const train::StageTimes t = *trainer.stage_times();
    CHECK(t.prefetch_ahead_ms > 0);  // every step but the first was filled ahead
    CHECK(t.prefetch_ms > 0);
}

TEST_CASE("TrainPipelineSparseDist: times the stages of every trained step", "[mpi][e2e]") {
    const Config config = parse_config(kConfig, {"train.pipeline=sparse_dist"});
    train::Trainer trainer(config, comm::world_process_group());
    auto warm = trainer.train_inputs(0, 2);
    while (trainer.progress(*warm)) {
    }
    trainer.reset_stage_times();
    CHECK(trainer.stage_times()->steps == 0);
    auto inputs = trainer.train_inputs(2, 7);
    const auto t0 = std::chrono::steady_clock::now();
    int64_t trained = 0;
    while (trainer.progress(*inputs))
        ++trained;
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const train::StageTimes t = *trainer.stage_times();
    CHECK(t.steps == trained);
    CHECK(trained == 5);
    CHECK(t.compute_ms > 0);
    CHECK(t.input_dist_ms > 0);  // the sharded arch's KJT all-to-alls
    CHECK(t.copy_ms >= 0);
    CHECK(t.compute_ms + t.input_dist_ms <= wall_ms);  // on the CPU both run on this thread

    const Config base_config = parse_config(kConfig, {"train.pipeline=base"});
    train::Trainer base(base_config, comm::world_process_group());
    CHECK(!base.stage_times());
}
