// The training loop's own invariants: no allocation per step after warm-up, the same numbers
// whatever the thread count, every model type lowers the loss on its first steps, and the trainer
// keeps its own copy of the config.
#include <sched.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "engine/core/allocator.h"
#include "engine/train/trainer.h"
#include "kernels/threads.h"
#include "test/support/compare.h"

using namespace shardrec;

namespace {

const char* const kSmallConfig = R"(
train: {steps: 40, seed: 3, log_every: 10, eval_samples: 1024}
data: {type: synthetic, batch_size: 64}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  tables:
    - {name: a, num_embeddings: 500, pooling_factor: 2}
    - {name: b, num_embeddings: 300}
    - {name: c, num_embeddings: 200, pooling: mean, pooling_factor: 3}
optimizer:
  dense: {type: adagrad, learning_rate: 0.05}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
)";

std::vector<float> losses(const Config& config, int steps) {
    train::Trainer trainer(config, nullptr);
    std::vector<float> out;
    for (int s = 0; s < steps; ++s)
        out.push_back(trainer.train_step(trainer.train_batch(s), s).loss);
    return out;
}

}  // namespace

TEST_CASE("Trainer: no allocation per step after warm-up", "[train]") {
    const std::vector<std::vector<std::string>> variants = {
        {"model.type=dlrm"},
        {"model.type=dlrm_dcn", "model.dcn.low_rank=4"},
        {"model.type=deepfm", "model.deepfm.hidden=[16, 8]"},
        // Weighted and position-weighted features (PositionWeightedModule's KJTs).
        {"model.type=dlrm", "model.tables[0].weighted=true", "model.tables[1].position_weights=4"},
        // A managed-collision table (the route's buffers), evicting every other step.
        {"model.type=dlrm", "model.tables[1].managed_collision.zch_size=100",
         "model.tables[1].managed_collision.mch_size=200",
         "model.tables[1].managed_collision.eviction_interval=2"},
    };
    for (const std::vector<std::string>& sets : variants) {
        const std::string type = sets.back();
        const Config config = parse_config(kSmallConfig, sets);
        train::Trainer trainer(config, nullptr);
        std::vector<Batch> batches;
        for (int s = 0; s < 6; ++s)
            batches.push_back(trainer.train_batch(s));
        // Warm-up: every batch once (the grow-only buffers see their sizes; the managed table's
        // slots fill and its passes evict), then the same batches again.
        for (int s = 0; s < 6; ++s)
            (void)trainer.train_step(batches[s], s);
        const int64_t before = alloc_stats(DeviceType::kCpu).num_allocs;
        for (int s = 6; s < 12; ++s)
            (void)trainer.train_step(batches[s - 6], s);
        INFO(type);
        CHECK(alloc_stats(DeviceType::kCpu).num_allocs == before);
    }
}

TEST_CASE("Trainer: losses are bitwise the same with 1 and 2 threads", "[train]") {
    const Config config =
        parse_config(kSmallConfig, {"model.type=dlrm_dcn", "model.dcn.low_rank=4"});
    kernels::set_cpu_threads(1);
    const std::vector<float> one = losses(config, 8);
    kernels::set_cpu_threads(2);
    const std::vector<float> two = losses(config, 8);
    REQUIRE(one.size() == two.size());
    for (size_t i = 0; i < one.size(); ++i) {
        INFO("step " << i << ": " << one[i] << " vs " << two[i]);
        CHECK(std::memcmp(&one[i], &two[i], sizeof(float)) == 0);
    }
}

TEST_CASE("parallel_tasks: every task once, and the first error rethrown", "[train]") {
    kernels::set_cpu_threads(2);
    std::vector<int> runs(100, 0);
    kernels::parallel_tasks(100, [&](int64_t i) { ++runs[static_cast<size_t>(i)]; });
    CHECK(std::count(runs.begin(), runs.end(), 1) == 100);
    CHECK_THROWS_WITH(kernels::parallel_tasks(8,
                                              [&](int64_t i) {
                                                  if (i == 5)
                                                      throw Error("task 5 failed");
                                              }),
                      "task 5 failed");
}

TEST_CASE("Trainer: every model type learns on the planted signal", "[train]") {
    for (const char* type : {"dlrm", "dlrm_dcn", "deepfm"}) {
        std::vector<std::string> sets = {std::string("model.type=") + type};
        if (std::string(type) == "dlrm_dcn")
            sets.push_back("model.dcn.low_rank=4");
        if (std::string(type) == "deepfm")
            sets.push_back("model.deepfm.hidden=[16, 8]");
        const Config config = parse_config(kSmallConfig, sets);
        train::Trainer trainer(config, nullptr);
        const double auc_before = trainer.evaluate().auc;
        for (int s = 0; s < 150; ++s)
            (void)trainer.train_step(trainer.train_batch(s), s);
        const double auc_after = trainer.evaluate().auc;
        INFO(type << ": eval AUC " << auc_before << " -> " << auc_after);
        CHECK(auc_after > auc_before + 0.05);
        CHECK(auc_after > 0.65);
    }
}

TEST_CASE("Trainer: owns its config (the one it was made from may change or go)", "[train]") {
    auto config = std::make_unique<Config>(parse_config(kSmallConfig, {}));
    train::Trainer trainer(*config, nullptr);
    config->model.tables[0].name = "changed";
    config->train.seed = 99;
    config.reset();
    CHECK(trainer.config().model.tables[0].name == "a");
    CHECK(trainer.config().train.seed == 3);
    CHECK(std::isfinite(trainer.train_step(trainer.train_batch(0), 0).loss));
}

TEST_CASE("configure_threads: 0 takes OMP_NUM_THREADS, else the CPUs of the affinity mask",
          "[train]") {
    Config config = parse_config(
        "train: {steps: 1}\ndata: {batch_size: 4}\n"
        "model: {type: dlrm, embedding_dim: 4, bottom_mlp: [4], top_mlp: [1], tables: [{name: a, "
        "num_embeddings: 4}]}",
        {});
    const char* omp = std::getenv("OMP_NUM_THREADS");
    const std::string saved_omp = omp != nullptr ? omp : "";
    cpu_set_t saved_mask;
    REQUIRE(sched_getaffinity(0, sizeof(saved_mask), &saved_mask) == 0);

    setenv("OMP_NUM_THREADS", "3", 1);
    {
        const test::ExpectLogs warned;  // 3 may be more than the mask's CPUs: said, and taken
        CHECK(train::configure_threads(config) == 3);
    }
    unsetenv("OMP_NUM_THREADS");
    // Bound to one CPU (srun --cpus-per-task=1, taskset -c 0): one thread, whatever the node has.
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
    CHECK(train::configure_threads(config) == 1);
    config.runtime.threads = 1;  // an explicit value is taken as it is
    CHECK(train::configure_threads(config) == 1);

    REQUIRE(sched_setaffinity(0, sizeof(saved_mask), &saved_mask) == 0);
    if (!saved_omp.empty())
        setenv("OMP_NUM_THREADS", saved_omp.c_str(), 1);
    config.runtime.threads = 0;
    (void)train::configure_threads(config);
}
