// TrainPipelineBase: one batch at a time, no overlap (TorchRec's reference pipeline). Each
// progress() runs forward, loss, backward (the fused embedding optimizer updates rows inside it)
// and the dense optimizer step. Pipelines with overlap must give exactly its numbers.
#pragma once

#include "engine/data/batch.h"
#include "engine/modules/model.h"
#include "engine/optim/dense_optimizer.h"

namespace shardrec::train {

struct StepResult {
    float loss = 0;  // mean BCE over the batch
};

class TrainPipelineBase {
public:
    TrainPipelineBase(RecModel& model, DenseOptimizer& optimizer);

    StepResult progress(const Batch& batch, float dense_lr, float sparse_lr);
    // Forward only (evaluation): logits [B], valid until the next call.
    const Tensor& predict(const Batch& batch);

private:
    RecModel& model_;
    DenseOptimizer& optimizer_;
    Tensor loss_;         // [1]
    Tensor grad_logits_;  // [B], reused while B is unchanged
};

}  // namespace shardrec::train
