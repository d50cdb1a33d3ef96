// The checks a batch passes where it enters the model (Trainer::train_step and evaluate), once per
// batch and before any collective, so that the ids that reach the sharded input_dist and the
// lookup kernels are valid and a bad sample is named while it is still in hand:
//   - ids against their table's rows, as runtime.bounds_check says (TorchRec BoundsCheckMode):
//     fatal throws naming table, feature, sample, id and the valid range; warning replaces each
//     bad id with row 0 (FBGEMM's bounds_check_indices does the same), counts them and logs the
//     first kMaxLoggedIds per process; ignore replaces them with row 0 silently. The id is always
//     checked: an unchecked id would read outside the table (TorchRec's NONE is not offered).
//   - NaN or Inf in the dense features or the labels, as runtime.nan_policy says: stop throws
//     naming the feature and the sample; skip_batch reports it so that the pipeline drops the
//     batch on every rank (TrainPipelineBase::progress decides collectively).
// The KJT's own layout (negative lengths, lengths that do not add up to the values, weights of
// the wrong size) is validated when it is built (KeyedJaggedTensor::validate).
// Cost: one pass over the ids and the dense values; nothing is allocated unless an id is replaced.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "engine/config/config.h"
#include "engine/sparse/batch.h"

namespace shardrec::train {

enum class BoundsCheckMode { kFatal, kWarning, kIgnore };
enum class NanPolicy { kStop, kSkipBatch };

BoundsCheckMode parse_bounds_check_mode(const std::string& name);  // fatal | warning | ignore
NanPolicy parse_nan_policy(const std::string& name);               // stop | skip_batch

// Where a batch comes from, for messages: "train step 12, rank 1".
struct BatchOrigin {
    const char* split = "train";  // train | eval
    int64_t step = 0;             // 1-based train step, or the eval batch index
    int rank = 0;
};

class BatchChecker {
public:
    static constexpr int64_t kMaxLoggedIds = 10;

    BatchChecker(const ModelConfig& model, BoundsCheckMode bounds, NanPolicy nan);

    // The batch to run: `batch` itself, or a copy whose out-of-range ids read row 0 (warning and
    // ignore; the copy lives until the next call). Throws an Error for a bad id under fatal and
    // for a non-finite dense value or label under stop. `finite` is set to whether every dense
    // value and label is finite (always true when it returns under stop).
    const Batch& check(const Batch& batch, const BatchOrigin& origin, bool& finite);

    int64_t invalid_ids() const { return invalid_ids_; }  // replaced by row 0 so far

private:
    struct FeatureBounds {
        std::string table;
        int64_t num_embeddings = 0;
    };

    bool check_ids(const Batch& batch, const BatchOrigin& origin);  // true when all are valid
    void replace_invalid_ids(const Batch& batch, const BatchOrigin& origin);
    bool check_finite(const Batch& batch, const BatchOrigin& origin) const;

    std::unordered_map<std::string, FeatureBounds> features_;
    BoundsCheckMode bounds_;
    NanPolicy nan_;
    Batch fixed_;
    int64_t invalid_ids_ = 0;
};

}  // namespace shardrec::train
