// Metrics across ranks: global_metrics gives every rank, bitwise, the metrics of the whole eval
// set however it is split over the ranks (np 1, 2, 4 agree), and a sharded Trainer's evaluate()
// matches one process evaluating the same samples with unsharded tables.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "comm/process_group.h"
#include "engine/core/rng.h"
#include "engine/train/metrics.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using namespace shardrec;

namespace {

// The same value on every rank: min and max over the ranks agree (NaN counts as equal).
bool same_on_every_rank(double value) {
    double lo = 0;
    double hi = 0;
    const double v = std::isnan(value) ? -1e300 : value;
    MPI_Allreduce(&v, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

}  // namespace

TEST_CASE("global_metrics: every rank gets the whole set's metrics, bitwise", "[mpi]") {
    auto pg = comm::world_process_group();
    const int world = pg->size();
    const int rank = pg->rank();
    const int64_t n = 1001;
    rng::Rng gen(test::test_seed(), 11);
    std::vector<float> logits(n), labels(n);
    for (int64_t i = 0; i < n; ++i) {
        labels[i] = gen.uniform() < 0.25 ? 1.0f : 0.0f;
        logits[i] = static_cast<float>(gen.randint(0, 40)) / 8.0f - 2.5f + labels[i];  // ties
    }
    const train::Metrics whole = train::compute_metrics(logits.data(), labels.data(), n);
    // Uneven slices: rank r holds [cut(r), cut(r+1)) with cut(r) = n r^2 / W^2.
    auto cut = [&](int r) { return world == 1 ? r * n : n * r * r / (world * world); };
    train::MetricsAccumulator local;
    local.add(logits.data() + cut(rank), labels.data() + cut(rank), cut(rank + 1) - cut(rank));
    const train::Metrics got = train::global_metrics(local, pg.get());
    INFO("rank " << rank << " of " << world << ", local " << local.count());
    CHECK(got.count == n);
    CHECK(got.auc == whole.auc);
    CHECK(got.loss == whole.loss);
    CHECK(got.ne == whole.ne);
    CHECK(got.accuracy == whole.accuracy);
    CHECK(got.calibration == whole.calibration);
    const train::MetricsAccumulator gathered = train::all_gather_pairs(local, pg.get());
    CHECK(gathered.logits() == logits);  // in rank order: the original order
    CHECK(gathered.labels() == labels);
}

TEST_CASE("Trainer::evaluate: sharded over the ranks equals one process", "[mpi]") {
    const char* const config_text = R"(
train: {steps: 6, seed: 4, log_every: 10, eval_samples: 512}
data: {type: synthetic, batch_size: 16}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  tables:
    - {name: a, num_embeddings: 200, pooling_factor: 2}
    - {name: b, num_embeddings: 57}
optimizer:
  dense: {type: adagrad, learning_rate: 0.05}
  sparse: {type: adagrad, learning_rate: 0.05}
sharding: {sharding_type: row_wise}
)";
    auto pg = comm::world_process_group();
    const int world = pg->size();
    const Config sharded_config = parse_config(config_text, {});
    const Config one_config =
        parse_config(config_text, {"data.batch_size=" + std::to_string(16 * world)});
    train::Trainer sharded(sharded_config, pg);
    train::Trainer one(one_config, nullptr);
    for (int64_t s = 0; s < sharded_config.train.steps; ++s) {
        (void)sharded.train_step(sharded.train_batch(s), s);
        (void)one.train_step(one.train_batch(s), s);
    }
    const train::Metrics a = sharded.evaluate();
    const train::Metrics b = one.evaluate();
    CHECK(a.count == 512);
    CHECK(b.count == 512);
    for (double v : {a.auc, a.loss, a.ne, a.accuracy, a.calibration}) {
        CHECK(same_on_every_rank(v));
    }
    // Same samples, logits equal to float rounding (reduction order): a swapped near-tie moves
    // the AUC by 1 / (positives * negatives) and the accuracy by 1 / 512.
    CHECK(std::abs(a.loss - b.loss) <= 1e-5 * b.loss);
    CHECK(std::abs(a.ne - b.ne) <= 1e-5 * b.ne);
    CHECK(std::abs(a.calibration - b.calibration) <= 1e-5 * b.calibration);
    CHECK(std::abs(a.auc - b.auc) <= 1e-3);
    CHECK(std::abs(a.accuracy - b.accuracy) <= 2.0 / 512);
}
