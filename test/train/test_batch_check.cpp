// BatchChecker (runtime.bounds_check, runtime.nan_policy), the pipeline's collective skip of a
// non-finite batch, and the fault-injection spec parser of the end-to-end fault tests.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/train/batch_check.h"
#include "engine/train/fault_inject.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::train;
using Catch::Matchers::Contains;

namespace {

const char* const kConfig = R"(
train: {steps: 4, seed: 5, log_every: 1, eval_samples: 64}
data: {type: synthetic, batch_size: 4}
model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  tables:
    - {name: users, num_embeddings: 10, feature_names: [user]}
    - {name: items, num_embeddings: 5, feature_names: [item, item2]}
)";

// Keys user, item, item2 (B = 2): user [[1, 2], [3]], item [[4], []], item2 [[0], [4, 1]], with
// `values` replacing the ids in that order.
Batch make_batch(std::vector<int64_t> values = {1, 2, 3, 4, 0, 4, 1}) {
    Batch b;
    b.dense = Tensor::from_vector(std::vector<float>{0.5f, 1.0f, -2.0f, 3.0f}, {2, 2});
    b.labels = Tensor::from_vector(std::vector<float>{1.0f, 0.0f});
    b.sparse = KeyedJaggedTensor::from_lengths_sync(
        {"user", "item", "item2"}, Tensor::from_vector(values),
        Tensor::from_vector(std::vector<int64_t>{2, 1, 1, 0, 1, 2}));
    return b;
}

std::vector<int64_t> ids_of(const Batch& b) {
    const Tensor& v = b.sparse.values();
    return std::vector<int64_t>(v.data<int64_t>(), v.data<int64_t>() + v.numel());
}

}  // namespace

TEST_CASE("BatchChecker: valid batches pass through untouched", "[train]") {
    const Config config = parse_config(kConfig, {});
    BatchChecker checker(config.model, BoundsCheckMode::kFatal, NanPolicy::kStop);
    const Batch batch = make_batch();
    bool finite = false;
    const Batch& out = checker.check(batch, BatchOrigin{"train", 1, 0}, finite);
    CHECK(&out == &batch);
    CHECK(finite);
    CHECK(checker.invalid_ids() == 0);
}

TEST_CASE("BatchChecker: fatal names table, feature, sample, id and range", "[train]") {
    const Config config = parse_config(kConfig, {});
    BatchChecker checker(config.model, BoundsCheckMode::kFatal, NanPolicy::kStop);
    bool finite = true;
    // item2's second sample holds id 5 of a 5-row table.
    const Batch high = make_batch({1, 2, 3, 4, 0, 5, 1});
    REQUIRE_THROWS_WITH(checker.check(high, BatchOrigin{"train", 7, 1}, finite),
                        Contains("train step 7, rank 1") && Contains("table 'items'") &&
                            Contains("feature 'item2'") && Contains("sample 1 ") &&
                            Contains("id 5 ") && Contains("[0, 5)") &&
                            Contains("runtime.bounds_check: fatal"));
    // A negative id in user's first sample.
    const Batch negative = make_batch({1, -3, 3, 4, 0, 4, 1});
    REQUIRE_THROWS_WITH(checker.check(negative, BatchOrigin{"eval", 2, 0}, finite),
                        Contains("eval step 2, rank 0") && Contains("feature 'user'") &&
                            Contains("sample 0 ") && Contains("id -3 ") && Contains("[0, 10)"));
}

TEST_CASE("BatchChecker: warning and ignore read bad ids as row 0 and count them", "[train]") {
    const Config config = parse_config(kConfig, {});
    for (BoundsCheckMode mode : {BoundsCheckMode::kWarning, BoundsCheckMode::kIgnore}) {
        BatchChecker checker(config.model, mode, NanPolicy::kStop);
        const Batch batch = make_batch({10, 2, 3, 4, -1, 4, 5});
        bool finite = false;
        test::ExpectLogs expect;  // warning logs the replaced ids
        const Batch& out = checker.check(batch, BatchOrigin{"train", 1, 0}, finite);
        CHECK(&out != &batch);
        CHECK(ids_of(out) == std::vector<int64_t>{0, 2, 3, 4, 0, 4, 0});
        CHECK(ids_of(batch) == std::vector<int64_t>{10, 2, 3, 4, -1, 4, 5});  // input unchanged
        CHECK(out.sparse.keys() == batch.sparse.keys());
        CHECK(out.sparse.offset_per_key() == batch.sparse.offset_per_key());
        CHECK(out.dense.data<float>() == batch.dense.data<float>());
        CHECK(checker.invalid_ids() == 3);
        // The next valid batch is passed through again.
        const Batch good = make_batch();
        CHECK(&checker.check(good, BatchOrigin{"train", 2, 0}, finite) == &good);
        CHECK(checker.invalid_ids() == 3);
    }
}

TEST_CASE("BatchChecker: NaN or Inf in dense features or labels stops or is reported", "[train]") {
    const Config config = parse_config(kConfig, {});
    BatchChecker stop(config.model, BoundsCheckMode::kFatal, NanPolicy::kStop);
    BatchChecker skip(config.model, BoundsCheckMode::kFatal, NanPolicy::kSkipBatch);
    bool finite = true;
    Batch dense = make_batch();
    dense.dense.data<float>()[3] = INFINITY;  // sample 1, feature 1
    REQUIRE_THROWS_WITH(stop.check(dense, BatchOrigin{"train", 3, 1}, finite),
                        Contains("train step 3, rank 1") &&
                            Contains("dense feature 1 of sample 1") && Contains("inf") &&
                            Contains("runtime.nan_policy: stop"));
    Batch label = make_batch();
    label.labels.data<float>()[0] = NAN;
    REQUIRE_THROWS_WITH(stop.check(label, BatchOrigin{"train", 3, 0}, finite),
                        Contains("label of sample 0") && Contains("nan"));
    test::ExpectLogs expect;
    finite = true;
    CHECK(&skip.check(dense, BatchOrigin{"train", 3, 1}, finite) == &dense);
    CHECK_FALSE(finite);
    finite = true;
    skip.check(label, BatchOrigin{"train", 3, 1}, finite);
    CHECK_FALSE(finite);
    const Batch good = make_batch();
    skip.check(good, BatchOrigin{"train", 4, 1}, finite);
    CHECK(finite);
}

TEST_CASE("Trainer: skip_batch leaves every parameter unchanged; stop throws", "[train]") {
    const Config skip_config = parse_config(kConfig, {"runtime.nan_policy=skip_batch"});
    Trainer trainer(skip_config, nullptr);
    (void)trainer.train_step(trainer.train_batch(0), 0);
    std::vector<std::vector<float>> before;
    for (Parameter* p : trainer.model().parameters()) {
        before.emplace_back(p->value.data<float>(), p->value.data<float>() + p->value.numel());
    }
    Batch bad = trainer.train_batch(1);
    bad.dense = bad.dense.clone();
    bad.dense.data<float>()[0] = NAN;
    test::ExpectLogs expect;
    const StepResult r = trainer.train_step(bad, 1);
    CHECK(r.skipped);
    CHECK(std::isnan(r.loss));
    // A NaN label passes the input check only when the caller skips it; the pipeline's loss
    // check catches it too (input_finite = true here).
    Batch bad_label = trainer.train_batch(1);
    bad_label.labels = bad_label.labels.clone();
    bad_label.labels.data<float>()[1] = NAN;
    TrainPipelineBase pipeline(trainer.model(), trainer.dense_optimizer());
    pipeline.set_skip_non_finite(true);
    CHECK(pipeline.progress(bad_label, 0.1f, 0.1f, true).skipped);
    size_t i = 0;
    for (Parameter* p : trainer.model().parameters()) {
        INFO(p->name);
        CHECK(std::vector<float>(p->value.data<float>(),
                                 p->value.data<float>() + p->value.numel()) == before[i++]);
    }
    // The next good batch trains normally.
    const StepResult good = trainer.train_step(trainer.train_batch(2), 2);
    CHECK_FALSE(good.skipped);
    CHECK(std::isfinite(good.loss));

    const Config stop_config = parse_config(kConfig, {});
    Trainer stopper(stop_config, nullptr);
    REQUIRE_THROWS_WITH(stopper.train_step(bad, 1), Contains("train step 2, rank 0") &&
                                                        Contains("dense feature 0 of sample 0"));
}

TEST_CASE("Fault injection: spec parsing and errors", "[train]") {
    const auto faults = parse_faults("1:3:stall,*:2:nan_dense,0:10:bad_id,1:1:exit");
    REQUIRE(faults.size() == 4);
    CHECK(faults[0].rank == 1);
    CHECK(faults[0].step == 3);
    CHECK(faults[0].kind == Fault::Kind::kStall);
    CHECK(faults[1].rank == -1);
    CHECK(faults[1].kind == Fault::Kind::kNanDense);
    CHECK(faults[2].kind == Fault::Kind::kBadId);
    CHECK(faults[3].kind == Fault::Kind::kExit);
    CHECK(parse_faults("").empty());
    CHECK_THROWS_WITH(parse_faults("1:3"), Contains("SHARDREC_FAULT_INJECT") && Contains("1:3"));
    CHECK_THROWS_WITH(parse_faults("1:0:stall"), Contains("step '0'"));
    CHECK_THROWS_WITH(parse_faults("x:1:stall"), Contains("rank 'x'"));
    CHECK_THROWS_WITH(parse_faults("1:1:explode"), Contains("kind 'explode'"));

    const Config config = parse_config(kConfig, {});
    FaultInjector inject(config.model, parse_faults("0:2:bad_id,1:2:nan_dense"));
    Batch batch = make_batch();
    test::ExpectLogs expect;
    inject.apply(1, 0, batch);  // another step: nothing
    CHECK(ids_of(batch) == ids_of(make_batch()));
    inject.apply(2, 0, batch);
    CHECK(ids_of(batch)[0] == 10);  // user's table has 10 rows
    CHECK(std::isfinite(batch.dense.data<float>()[0]));
    inject.apply(2, 1, batch);
    CHECK(std::isnan(batch.dense.data<float>()[0]));
}
