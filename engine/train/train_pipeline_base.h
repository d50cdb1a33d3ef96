// TrainPipelineBase: one batch at a time, no overlap (TorchRec's reference pipeline). Each
// progress() runs forward, loss, backward (the fused embedding optimizer updates rows inside it)
// and the dense optimizer step. With a process group the dense layers are data parallel: their
// gradients are averaged over the ranks in one bucketed all-reduce before the step, and the loss
// reported is the global mean. Pipelines with overlap must give exactly its numbers.
#pragma once

#include <memory>

#include "comm/process_group.h"
#include "engine/data/batch.h"
#include "engine/modules/model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/train/metrics.h"

namespace shardrec::train {

struct StepResult {
    float loss = 0;        // mean BCE over the batch (NaN when skipped)
    bool skipped = false;  // skip_non_finite: the batch changed no parameter on any rank
};

class TrainPipelineBase {
public:
    // pg: the ranks the dense layers are replicated over (nullptr: one process).
    TrainPipelineBase(RecModel& model,
                      DenseOptimizer& optimizer,
                      std::shared_ptr<comm::ProcessGroup> pg = nullptr);

    // input_finite: the caller's check of the dense features and labels (BatchChecker).
    StepResult progress(const Batch& batch,
                        float dense_lr,
                        float sparse_lr,
                        bool input_finite = true);

    // runtime.nan_policy skip_batch: after the forward, before anything changes, the ranks agree
    // in one all-reduce whether any saw a non-finite input or loss; if so every rank skips the
    // backward and both optimizer steps, so the replicas stay identical.
    void set_skip_non_finite(bool skip) { skip_non_finite_ = skip; }

    // Forward only (evaluation): logits [B], valid until the next call.
    const Tensor& predict(const Batch& batch);
    // Metrics over every rank's (logit, label) pairs, the same on every rank.
    Metrics global_metrics(const MetricsAccumulator& local) const;

private:
    RecModel& model_;
    DenseOptimizer& optimizer_;
    std::shared_ptr<comm::ProcessGroup> pg_;
    Tensor grad_bucket_;  // every dense gradient, flattened, for one all-reduce
    Tensor loss_;         // [1]
    Tensor skip_flag_;    // [1]: 1 when this rank wants the batch skipped (max over ranks)
    bool skip_non_finite_ = false;
    Tensor grad_logits_;  // [B], reused while B is unchanged
};

}  // namespace shardrec::train
