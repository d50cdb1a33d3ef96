#include "engine/train/batch_check.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "engine/core/log.h"

namespace shardrec::train {

BoundsCheckMode parse_bounds_check_mode(const std::string& name) {
    if (name == "fatal") {
        return BoundsCheckMode::kFatal;
    }
    if (name == "warning") {
        return BoundsCheckMode::kWarning;
    }
    SR_CHECK(name == "ignore", "runtime.bounds_check: expected fatal, warning or ignore, got '{}'",
             name);
    return BoundsCheckMode::kIgnore;
}

NanPolicy parse_nan_policy(const std::string& name) {
    if (name == "stop") {
        return NanPolicy::kStop;
    }
    SR_CHECK(name == "skip_batch", "runtime.nan_policy: expected stop or skip_batch, got '{}'",
             name);
    return NanPolicy::kSkipBatch;
}

BatchChecker::BatchChecker(const ModelConfig& model, BoundsCheckMode bounds, NanPolicy nan)
    : bounds_(bounds), nan_(nan) {
    for (const auto& table : model.tables) {
        for (const auto& feature : table.feature_names) {
            features_[feature] = FeatureBounds{table.name, table.num_embeddings};
        }
    }
}

namespace {

// The sample (bag index within the key) that holds value n of key f.
int64_t sample_of_value(const KeyedJaggedTensor& kjt, int64_t f, int64_t n) {
    const int64_t* off = kjt.offsets().data<int64_t>();
    const int64_t first = kjt.lengths_offset_per_key()[f];
    const int64_t last = kjt.lengths_offset_per_key()[f + 1];
    // The bag j with off[j] <= n < off[j + 1]: the last bag start <= n (empty bags share starts).
    const int64_t* it = std::upper_bound(off + first, off + last, n);
    return (it - off) - 1 - first;
}

}  // namespace

bool BatchChecker::check_ids(const Batch& batch, const BatchOrigin& origin) {
    const KeyedJaggedTensor& kjt = batch.sparse;
    const int64_t* ids = kjt.values().data<int64_t>();
    bool valid = true;
    for (int64_t f = 0; f < kjt.num_keys(); ++f) {
        const auto found = features_.find(kjt.keys()[f]);
        if (found == features_.end()) {
            continue;  // a key no table reads (the model ignores it)
        }
        const int64_t rows = found->second.num_embeddings;
        const int64_t begin = kjt.offset_per_key()[f];
        const int64_t end = kjt.offset_per_key()[f + 1];
        // One unsigned compare catches negative ids too.
        int64_t n = begin;
        while (n < end && static_cast<uint64_t>(ids[n]) < static_cast<uint64_t>(rows)) {
            ++n;
        }
        if (n == end) {
            continue;
        }
        SR_CHECK(bounds_ != BoundsCheckMode::kFatal,
                 "{} step {}, rank {}: table '{}' feature '{}' sample {} of the rank's batch: id "
                 "{} is outside the table's rows [0, {}) (runtime.bounds_check: fatal; warning "
                 "or ignore read row 0 instead)",
                 origin.split, origin.step, origin.rank, found->second.table, kjt.keys()[f],
                 sample_of_value(kjt, f, n), ids[n], rows);
        valid = false;
    }
    return valid;
}

void BatchChecker::replace_invalid_ids(const Batch& batch, const BatchOrigin& origin) {
    const KeyedJaggedTensor& kjt = batch.sparse;
    Tensor values = kjt.values().clone();
    int64_t* ids = values.data<int64_t>();
    for (int64_t f = 0; f < kjt.num_keys(); ++f) {
        const auto found = features_.find(kjt.keys()[f]);
        if (found == features_.end()) {
            continue;
        }
        const int64_t rows = found->second.num_embeddings;
        for (int64_t n = kjt.offset_per_key()[f]; n < kjt.offset_per_key()[f + 1]; ++n) {
            if (static_cast<uint64_t>(ids[n]) < static_cast<uint64_t>(rows)) {
                continue;
            }
            if (bounds_ == BoundsCheckMode::kWarning && invalid_ids_ < kMaxLoggedIds) {
                log::all().warn(
                    "{} step {}: table '{}' feature '{}' sample {} of the rank's batch: id {} is "
                    "outside [0, {}), read as row 0 (runtime.bounds_check: warning{})",
                    origin.split, origin.step, found->second.table, kjt.keys()[f],
                    sample_of_value(kjt, f, n), ids[n], rows,
                    invalid_ids_ + 1 == kMaxLoggedIds ? "; further ids are only counted" : "");
            }
            ids[n] = 0;
            ++invalid_ids_;
        }
    }
    fixed_.dense = batch.dense;
    fixed_.labels = batch.labels;
    fixed_.sparse =
        kjt.variable_stride_per_key()
            ? KeyedJaggedTensor::from_lengths_variable_stride(
                  kjt.keys(), values, kjt.lengths(), kjt.stride_per_key(), kjt.weights_or_none())
            : KeyedJaggedTensor::from_lengths_sync(kjt.keys(), values, kjt.lengths(),
                                                   kjt.weights_or_none(), kjt.stride());
}

bool BatchChecker::check_finite(const Batch& batch, const BatchOrigin& origin) const {
    const int64_t B = batch.batch_size();
    const float* labels = batch.labels.data<float>();
    bool finite = true;
    for (int64_t b = 0; b < B && finite; ++b) {
        finite = std::isfinite(labels[b]);
    }
    if (!finite) {
        const int64_t b =
            std::find_if(labels, labels + B, [](float x) { return !std::isfinite(x); }) - labels;
        SR_CHECK(nan_ != NanPolicy::kStop,
                 "{} step {}, rank {}: the label of sample {} of the rank's batch is {} "
                 "(runtime.nan_policy: stop)",
                 origin.split, origin.step, origin.rank, b, labels[b]);
        log::all().warn("{} step {}: the label of sample {} is {}; the batch is skipped",
                        origin.split, origin.step, b, labels[b]);
        return false;
    }
    if (!batch.dense.defined() || batch.dense.numel() == 0) {
        return true;
    }
    const float* dense = batch.dense.data<float>();
    const int64_t n = batch.dense.numel();
    // One vectorisable pass: x * 0 is 0 for a finite x and NaN for NaN or Inf, so the sum is
    // finite exactly when every value is; only then the slow search names the first bad one.
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        sum += dense[i] * 0.0f;
    }
    if (std::isfinite(sum)) {
        return true;
    }
    const int64_t i =
        std::find_if(dense, dense + n, [](float x) { return !std::isfinite(x); }) - dense;
    const int64_t features = batch.dense.dim() == 2 ? batch.dense.size(1) : 1;
    SR_CHECK(nan_ != NanPolicy::kStop,
             "{} step {}, rank {}: dense feature {} of sample {} of the rank's batch is {} "
             "(runtime.nan_policy: stop; skip_batch drops such batches on every rank)",
             origin.split, origin.step, origin.rank, i % features, i / features, dense[i]);
    log::all().warn("{} step {}: dense feature {} of sample {} is {}; the batch is skipped",
                    origin.split, origin.step, i % features, i / features, dense[i]);
    return false;
}

const Batch& BatchChecker::check(const Batch& batch, const BatchOrigin& origin, bool& finite) {
    finite = check_finite(batch, origin);
    if (check_ids(batch, origin)) {
        return batch;
    }
    replace_invalid_ids(batch, origin);
    return fixed_;
}

}  // namespace shardrec::train
