#include "engine/train/train_pipeline_base.h"

#include "engine/core/stream.h"
#include "kernels/bce_with_logits.h"

namespace shardrec::train {

TrainPipelineBase::TrainPipelineBase(RecModel& model, DenseOptimizer& optimizer)
    : model_(model), optimizer_(optimizer), loss_(Tensor::zeros({1}, DType::kF32)) {}

StepResult TrainPipelineBase::progress(const Batch& batch, float dense_lr, float sparse_lr) {
    const int64_t B = batch.batch_size();
    if (!grad_logits_.defined() || grad_logits_.numel() != B) {
        grad_logits_ = Tensor::empty({B}, DType::kF32);
    }
    const Tensor& logits = model_.forward(batch);
    kernels::bce_with_logits(logits, batch.labels, loss_, grad_logits_, Stream::cpu());
    model_.sparse_arch().set_learning_rate(sparse_lr);
    model_.backward(grad_logits_);
    optimizer_.step(model_.parameters(), dense_lr);
    return StepResult{loss_.data<float>()[0]};
}

const Tensor& TrainPipelineBase::predict(const Batch& batch) {
    return model_.forward(batch);
}

}  // namespace shardrec::train
