// Sharding invariance (ARCHITECTURE.md): with the same seed and global batch, every plan gives the
// losses and table rows of one process with unsharded tables. Each rank computes that one-process
// reference itself (the whole global batch, no collective), trains the sharded model with the
// other ranks, and compares.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "comm/mpi_env.h"
#include "comm/process_group.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using namespace shardrec;

namespace {

// Rows not divisible by 4 (or 3), a MEAN table, a weighted table, a table shared by two
// features, a position-weighted MEAN table of two features, and pooling factors with empty bags.
const char* const kConfig = R"(
train: {steps: 20, seed: 7, log_every: 10, eval_samples: 256}
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
    - {name: tiny, num_embeddings: 3}
    - {name: pos, num_embeddings: 59, pooling: mean, pooling_factor: 2.5, position_weights: 4,
       feature_names: [p1, p2]}
optimizer:
  dense: {type: adagrad, learning_rate: 0.05}
  sparse: {type: adagrad, learning_rate: 0.05}
)";

struct Run {
    std::vector<float> losses;
    std::vector<Tensor> tables;
};

Config with_sharding(const std::string& sharding, int batch_size) {
    std::string text = std::string(kConfig) + "sharding: " + sharding + "\n";
    return parse_config(text, {"data.batch_size=" + std::to_string(batch_size)});
}

void check_invariance(const std::string& sharding) {
    auto pg = comm::world_process_group();
    const int world = pg->size();
    const int64_t B = 8;
    const Config sharded_config = with_sharding(sharding, static_cast<int>(B));
    const Config reference_config = with_sharding(sharding, static_cast<int>(B * world));

    train::Trainer sharded(sharded_config, pg);
    train::Trainer reference(reference_config, nullptr);
    std::vector<float> sharded_losses, reference_losses;
    for (int64_t s = 0; s < sharded_config.train.steps; ++s) {
        sharded_losses.push_back(sharded.train_step(sharded.train_batch(s), s).loss);
        reference_losses.push_back(reference.train_step(reference.train_batch(s), s).loss);
    }
    test::require_close(sharded_losses, reference_losses, 1e-6, 1e-5, sharding + " loss");

    auto& ebc = dynamic_cast<ShardedEmbeddingBagCollection&>(sharded.model().sparse_arch());
    auto& ref = dynamic_cast<EmbeddingBagCollection&>(reference.model().sparse_arch());
    for (int64_t t = 0; t < static_cast<int64_t>(ref.tables().size()); ++t) {
        // The dense gradients are averaged over ranks in another order than one process sums
        // them; Adagrad's g / sqrt(G) turns those last-bit differences into ~1e-4 relative ones
        // on rows with tiny gradients. A missing or doubled update moves a row by ~lr = 0.05.
        test::require_close(ebc.unsharded_weight(t).to_vector<float>(),
                            ref.weight(t).to_vector<float>(), 5e-5, 5e-4,
                            sharding + " table " + ref.tables()[static_cast<size_t>(t)].name);
    }
    // The position weights: dense parameters, every rank's part of their gradient summed.
    int64_t position_weights = 0;
    for (Parameter* p : reference.model().parameters()) {
        if (p->name.rfind("position_weights.", 0) != 0)
            continue;
        ++position_weights;
        for (Parameter* q : sharded.model().parameters()) {
            if (q->name == p->name) {
                test::require_close(q->value.to_vector<float>(), p->value.to_vector<float>(), 5e-5,
                                    5e-4, sharding + " " + p->name);
                CHECK(q->value.to_vector<float>() != std::vector<float>(4, 1.0f));  // trained
                // Adagrad hides a constant factor on the gradient; the last step's shows it.
                test::require_close(q->grad.to_vector<float>(), p->grad.to_vector<float>(), 1e-6,
                                    1e-4, sharding + " " + p->name + " gradient");
            }
        }
    }
    CHECK(position_weights == 2);
    const train::Metrics m_sharded = sharded.evaluate();
    const train::Metrics m_reference = reference.evaluate();
    CHECK(std::fabs(m_sharded.auc - m_reference.auc) < 1e-4);
}

}  // namespace

TEST_CASE("sharding invariance: table_wise", "[mpi][e2e]") {
    check_invariance("{sharding_type: table_wise}");
}

TEST_CASE("sharding invariance: row_wise", "[mpi][e2e]") {
    check_invariance("{sharding_type: row_wise}");
}

TEST_CASE("sharding invariance: column_wise", "[mpi][e2e]") {
    check_invariance("{sharding_type: column_wise}");
}

TEST_CASE("sharding invariance: table_row_wise", "[mpi][e2e]") {
    check_invariance("{sharding_type: table_row_wise}");
}

TEST_CASE("sharding invariance: data_parallel", "[mpi][e2e]") {
    check_invariance("{sharding_type: data_parallel}");
}

TEST_CASE("sharding invariance: a mixed plan, every table on rank 0 but one", "[mpi][e2e]") {
    check_invariance(
        "{sharding_type: table_wise, tables: [{name: big, sharding_type: row_wise}, "
        "{name: avg, sharding_type: column_wise}, {name: wtd, sharding_type: data_parallel}, "
        "{name: shared, ranks: [0]}, {name: tiny, ranks: [0]}, "
        "{name: pos, ranks: [0]}]}");
}

TEST_CASE("sharding: a topology of another device is refused, another node size is warned",
          "[mpi][e2e]") {
    auto pg = comm::world_process_group();
    if (pg->size() < 2) {
        test::not_run("one rank trains unsharded: no topology is read");
        return;
    }
    const std::string tmp = "/tmp/shardrec_topology_" + std::to_string(pg->rank());
    const std::string gpu = tmp + "_cuda.yaml";
    std::ofstream(gpu) << "compute_device: cuda\nlocal_size: 8\n";
    const std::string error = test::error_of([&] {
        train::Trainer t(with_sharding("{sharding_type: table_wise, topology: " + gpu + "}", 8),
                         pg);
    });
    CHECK_THAT(error, Catch::Contains("sharding.topology '" + gpu +
                                      "' describes cuda ranks, but "
                                      "this run computes on cpu"));
    // A node of one rank in the file, MPI's placement in the run: the run plans with MPI's.
    const std::string one = tmp + "_local1.yaml";
    std::ofstream(one) << "compute_device: cpu\nlocal_size: 1\n";
    const int placed = comm::process_info().local_size;
    if (placed == 1) {  // emulated nodes of one rank: the file agrees
        train::Trainer t(with_sharding("{sharding_type: table_wise, topology: " + one + "}", 8),
                         pg);
    } else {
        test::ExpectLogs warned;  // "... has local_size 1, but MPI placed 2 of these ranks ..."
        train::Trainer t(with_sharding("{sharding_type: table_wise, topology: " + one + "}", 8),
                         pg);
    }
    std::remove(one.c_str());
    std::remove(gpu.c_str());
}
