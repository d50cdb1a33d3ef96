// 2D parallelism (sharding.replica_groups R, TorchRec DMPCollection): the tables sharded over
// W / R ranks and that sharding replicated R times train as one sharding over the W ranks (within
// the sharding-invariance tolerance), the replicas stay bitwise identical, R = 1 is the 1D run bit
// for bit, an R that does not divide W is refused, and a checkpoint (the first group's shards)
// resumes bit for bit; key_value tables (each replica's cache takes the rows the other replicas
// touched for the update) train as the rows in memory. Under real mpirun at 1, 2 and 4 ranks
// (and 4 as two emulated nodes).
#include <catch2/catch.hpp>
#include <filesystem>

#include "comm/process_group.h"
#include "engine/distributed/planner.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/modules/embedding_bag_collection.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using namespace shardrec;
namespace fs = std::filesystem;

namespace {

// As test_sharding_invariance: a MEAN table, weighted and position-weighted features, a table
// shared by two features, empty bags.
const char* const kConfig = R"(
train: {steps: 8, seed: 11, log_every: 10, eval_samples: 64}
data: {type: synthetic, batch_size: 8}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  tables:
    - {name: big, num_embeddings: 301, pooling_factor: 2}
    - {name: avg, num_embeddings: 97, pooling: mean, pooling_factor: 3}
    - {name: wtd, num_embeddings: 50, weighted: true, pooling_factor: 0.7}
    - {name: shared, num_embeddings: 41, feature_names: [s1, s2]}
    - {name: pos, num_embeddings: 59, pooling: mean, pooling_factor: 2.5, position_weights: 4,
       feature_names: [p1, p2]}
)";

// The dense layers under SGD: adagrad's first steps divide each weight's gradient by its own
// magnitude, so where a gradient is tiny the few-ulp differences of the GEMMs' summation order
// (the one process's batch against the ranks' all-reduced parts, and OpenBLAS's kernel for each
// CPU) grew to 8e-5 in a row after 8 steps (table_wise, 4 ranks, an AVX2 CPU); under SGD the
// same tables differed by 4e-7 at most, with adagrad on the rows.
Config config_of(const std::string& sharding, const std::string& sparse) {
    return parse_config(
        std::string(kConfig) + "sharding: " + sharding + "\n" +
            "optimizer: {dense: {type: sgd, learning_rate: 0.05}, sparse: " + sparse + "}\n",
        {});
}

struct Trained {
    std::vector<float> losses;
    std::vector<std::vector<float>> tables;
};

// Steps `a` and `b` in lockstep (both are collective over the world); their losses and tables.
std::pair<Trained, Trained> train_both(train::Trainer& a, train::Trainer& b, int64_t steps) {
    Trained ra, rb;
    for (int64_t s = 0; s < steps; ++s) {
        ra.losses.push_back(a.train_step(a.train_batch(s), s).loss);
        rb.losses.push_back(b.train_step(b.train_batch(s), s).loss);
    }
    auto& ea = dynamic_cast<ShardedEmbeddingBagCollection&>(a.model().sparse_arch());
    auto& eb = dynamic_cast<ShardedEmbeddingBagCollection&>(b.model().sparse_arch());
    for (int64_t t = 0; t < 5; ++t) {
        ra.tables.push_back(ea.unsharded_weight(t).to_vector<float>());
        rb.tables.push_back(eb.unsharded_weight(t).to_vector<float>());
    }
    return {ra, rb};
}

// 2D with R = 2 against the one process with the whole global batch that sharding invariance
// holds every 1D plan to (test_sharding_invariance.cpp, the same tolerances: 1D and 2D sum the
// rows' gradients in other orders, so each is that close to it, not bitwise). Then every rank's
// tables against rank 0's, bit for bit (each rank's unsharded_weight is its own group's copy).
void check_two_d(const std::string& sharding, const std::string& sparse) {
    auto pg = comm::world_process_group();
    REQUIRE(pg->size() % 2 == 0);
    const std::string with_r = sharding.substr(0, sharding.size() - 1) + ", replica_groups: 2}";
    const Config two_d = config_of(with_r, sparse);
    Config one = config_of(sharding, sparse);
    one.data.batch_size *= pg->size();
    train::Trainer sharded(two_d, pg), reference(one, nullptr);
    std::vector<float> losses, reference_losses;
    for (int64_t s = 0; s < two_d.train.steps; ++s) {
        losses.push_back(sharded.train_step(sharded.train_batch(s), s).loss);
        reference_losses.push_back(reference.train_step(reference.train_batch(s), s).loss);
    }
    const std::string what = with_r + " " + sparse;
    test::require_close(losses, reference_losses, 1e-6, 1e-5, what + " loss");
    auto& ebc = dynamic_cast<ShardedEmbeddingBagCollection&>(sharded.model().sparse_arch());
    auto& ref = dynamic_cast<EmbeddingBagCollection&>(reference.model().sparse_arch());
    for (int64_t t = 0; t < static_cast<int64_t>(ref.tables().size()); ++t) {
        const std::vector<float> mine = ebc.unsharded_weight(t).to_vector<float>();
        test::require_close(mine, ref.weight(t).to_vector<float>(), 5e-5, 5e-4,
                            what + " table " + ref.tables()[static_cast<size_t>(t)].name);
        Tensor first = Tensor::from_vector(mine);
        pg->broadcast(first, 0).wait();
        CHECK(mine == first.to_vector<float>());  // bitwise, every replica
    }
    int64_t position_weights = 0;
    for (Parameter* p : reference.model().parameters()) {
        for (Parameter* q : sharded.model().parameters()) {
            if (p->name == q->name && p->name.rfind("position_weights.", 0) == 0) {
                ++position_weights;
                test::require_close(q->value.to_vector<float>(), p->value.to_vector<float>(), 5e-5,
                                    5e-4, what + " " + p->name);
            }
        }
    }
    CHECK(position_weights == 2);
}

}  // namespace

TEST_CASE("replica groups: 2D equals 1D, replicas bitwise identical", "[mpi][e2e][even_ranks]") {
    const char* const adagrad = "{type: adagrad, learning_rate: 0.05}";
    check_two_d("{sharding_type: table_wise}", adagrad);
    check_two_d("{sharding_type: row_wise}", adagrad);
    check_two_d("{sharding_type: table_row_wise}", adagrad);
    check_two_d("{sharding_type: data_parallel}", adagrad);
    check_two_d(
        "{sharding_type: column_wise, tables: [{name: big, sharding_type: row_wise}, "
        "{name: wtd, sharding_type: data_parallel}, {name: shared, sharding_type: table_wise}]}",
        "{type: adam, learning_rate: 0.01}");
    check_two_d("{planner: auto}", "{type: rowwise_adagrad, learning_rate: 0.05}");
}

// A cached shard (key_value: rows on disk, a DRAM cache) updates the rows the other replicas'
// batches touched too, brought into its cache for the update: the same numbers as the rows in
// memory, bit for bit, whatever the cache size (10 %: most batches evict and overflow; 100 %).
TEST_CASE("replica groups: key_value tables train as the rows in memory, bit for bit",
          "[mpi][e2e][even_ranks]") {
    auto pg = comm::world_process_group();
    const std::string storage =
        "/tmp/shardrec-test-replica-kv-np" + std::to_string(pg->size()) + "-";
    const char* const sparse = "{type: rowwise_adagrad, learning_rate: 0.05}";
    int run = 0;
    for (const std::string sharding :
         {"sharding_type: row_wise", "sharding_type: table_wise", "sharding_type: table_row_wise",
          "sharding_type: column_wise, tables: [{name: big, sharding_type: row_wise}, {name: "
          "wtd, sharding_type: data_parallel}]"}) {
        for (const std::string cache :
             {"{load_factor: 0.1, algorithm: lru}", "{load_factor: 0.1, algorithm: lfu}",
              "{load_factor: 1.0}"}) {
            const std::string kv = "{" + sharding +
                                   ", replica_groups: 2, compute_kernel: key_value, storage: "
                                   "{path: " +
                                   storage + std::to_string(run++) + "}, cache: " + cache + "}";
            INFO(kv);
            train::Trainer fused(config_of("{" + sharding + ", replica_groups: 2}", sparse), pg);
            train::Trainer cached(config_of(kv, sparse), pg);
            const auto [rf, rc] = train_both(fused, cached, 6);
            CHECK(rc.losses == rf.losses);
            CHECK(rc.tables == rf.tables);
            auto& ebc = dynamic_cast<ShardedEmbeddingBagCollection&>(cached.model().sparse_arch());
            double misses = 0;
            for (const auto& [table, stats] : ebc.cache_stats())
                misses += static_cast<double>(stats.misses);
            CHECK(misses > 0);
        }
    }
}

TEST_CASE("replica groups: 1 is the 1D run bit for bit", "[mpi][e2e]") {
    auto pg = comm::world_process_group();
    const char* const sparse = "{type: adagrad, learning_rate: 0.05}";
    train::Trainer a(config_of("{sharding_type: row_wise, replica_groups: 1}", sparse), pg);
    train::Trainer b(config_of("{sharding_type: row_wise}", sparse), pg);
    const auto [ra, rb] = train_both(a, b, 4);
    CHECK(ra.losses == rb.losses);
    CHECK(ra.tables == rb.tables);
}

TEST_CASE("replica groups: an R that does not divide the world is refused", "[mpi][e2e]") {
    auto pg = comm::world_process_group();
    const std::string R = std::to_string(pg->size() + 1);
    const Config config = config_of("{sharding_type: table_wise, replica_groups: " + R + "}",
                                    "{type: sgd, learning_rate: 1}");
    const std::string error = test::error_of([&] { train::Trainer t(config, pg); });
    CHECK_THAT(error, Catch::Contains("sharding.replica_groups " + R + " does not divide the " +
                                      std::to_string(pg->size()) + " rank(s)"));
}

TEST_CASE("replica groups: a group never straddles a node", "[planner]") {
    ShardingConfig s;
    s.replica_groups = 2;
    CHECK(sharding_group_size(s, 8, 4) == 4);   // a group is a node
    CHECK(sharding_group_size(s, 4, 4) == 2);   // two groups on one node
    CHECK(sharding_group_size(s, 16, 4) == 8);  // whole nodes
    CHECK_THAT(test::error_of([&] { sharding_group_size(s, 12, 4); }),
               Catch::Contains("a group of 6 consecutive ranks straddles a node of 4 ranks"));
    s.replica_groups = 1;
    CHECK(sharding_group_size(s, 12, 8) == 12);
}

// Rows in memory, and key_value tables (flushed into the checkpoint, read back into the store).
TEST_CASE("replica groups: a checkpoint resumes bitwise", "[mpi][e2e][even_ranks]") {
    auto pg = comm::world_process_group();
    REQUIRE(pg->size() % 2 == 0);
    const std::string np = std::to_string(pg->size());
    for (const std::string& kernel :
         {std::string(),
          ", compute_kernel: key_value, cache: {load_factor: 0.2}, storage: {path: "
          "/tmp/shardrec-test-replica-ckpt-kv-np" +
              np + "}"}) {
        INFO("sharding" << kernel);
        const fs::path dir = fs::temp_directory_path() / ("shardrec_replica_ckpt_np" + np);
        if (pg->rank() == 0) {
            fs::remove_all(dir);
            fs::create_directories(dir);
        }
        pg->barrier().wait();
        const Config config = config_of(
            "{sharding_type: row_wise, replica_groups: 2" + kernel +
                ", tables: [{name: avg, sharding_type: table_wise}, {name: wtd, sharding_type: "
                "data_parallel}]}",
            "{type: adam, learning_rate: 0.01}");
        train::Trainer straight(config, pg), first(config, pg);
        std::vector<float> straight_losses, losses;
        for (int64_t s = 0; s < 6; ++s)
            straight_losses.push_back(straight.train_step(straight.train_batch(s), s).loss);
        for (int64_t s = 0; s < 3; ++s)
            losses.push_back(first.train_step(first.train_batch(s), s).loss);
        train::save_checkpoint(first, dir.string(), 3, 1);
        train::Trainer resumed(config, pg);
        REQUIRE(train::load_checkpoint(resumed, dir.string(), {true}) == 3);
        for (int64_t s = 3; s < 6; ++s)
            losses.push_back(resumed.train_step(resumed.train_batch(s), s).loss);
        CHECK(losses == straight_losses);  // bitwise
        auto& a = dynamic_cast<ShardedEmbeddingBagCollection&>(resumed.model().sparse_arch());
        auto& b = dynamic_cast<ShardedEmbeddingBagCollection&>(straight.model().sparse_arch());
        for (int64_t t = 0; t < 5; ++t) {
            CHECK(a.unsharded_weight(t).to_vector<float>() ==
                  b.unsharded_weight(t).to_vector<float>());
        }
        pg->barrier().wait();
    }
}

TEST_CASE("replica groups: a sharding error names the group as its world", "[mpi][e2e]") {
    auto pg = comm::world_process_group();
    if (pg->size() < 2) {
        test::not_run("one rank: no replica group smaller than the world");
        return;
    }
    const std::string R = std::to_string(pg->size());
    const Config config = config_of("{sharding_type: table_wise, replica_groups: " + R +
                                        ", tables: [{name: big, sharding_type: table_wise, "
                                        "ranks: [1]}]}",
                                    "{type: sgd, learning_rate: 1}");
    const std::string error = test::error_of([&] { train::Trainer t(config, pg); });
    CHECK_THAT(error, Catch::Contains("rank 1 is out of range for world size 1") &&
                          Catch::Contains("(sharding.replica_groups " + R +
                                          ": the tables are sharded within each group of 1 of "
                                          "the " +
                                          R + " ranks"));
}
