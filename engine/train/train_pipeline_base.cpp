#include "engine/train/train_pipeline_base.h"

#include <cmath>
#include <limits>

#include "engine/core/stream.h"
#include "kernels/bce_with_logits.h"

namespace shardrec::train {

TrainPipelineBase::TrainPipelineBase(RecModel& model,
                                     DenseOptimizer& optimizer,
                                     std::shared_ptr<comm::ProcessGroup> pg)
    : model_(model),
      optimizer_(optimizer),
      pg_(std::move(pg)),
      loss_(Tensor::zeros({1}, DType::kF32)),
      skip_flag_(Tensor::zeros({1}, DType::kF32)) {}

namespace {

// Averages every parameter's gradient over the ranks through one flat buffer.
void all_reduce_gradients(comm::ProcessGroup& pg,
                          const std::vector<Parameter*>& params,
                          Tensor& bucket) {
    int64_t n = 0;
    for (const Parameter* p : params)
        n += p->grad.numel();
    if (!bucket.defined() || bucket.numel() != n)
        bucket = Tensor::empty({n}, DType::kF32);
    float* b = bucket.data<float>();
    for (const Parameter* p : params) {
        std::copy(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel(), b);
        b += p->grad.numel();
    }
    pg.all_reduce(bucket, comm::ReduceOp::kAvg).wait();
    const float* src = bucket.data<float>();
    for (Parameter* p : params) {
        std::copy(src, src + p->grad.numel(), p->grad.data<float>());
        src += p->grad.numel();
    }
}

}  // namespace

StepResult TrainPipelineBase::progress(const Batch& batch,
                                       float dense_lr,
                                       float sparse_lr,
                                       bool input_finite) {
    const int64_t B = batch.batch_size();
    if (!grad_logits_.defined() || grad_logits_.numel() != B) {
        grad_logits_ = Tensor::empty({B}, DType::kF32);
    }
    const Tensor& logits = model_.forward(batch);
    kernels::bce_with_logits(logits, batch.labels, loss_, grad_logits_, Stream::cpu());
    if (skip_non_finite_) {
        const bool finite = input_finite && std::isfinite(loss_.data<float>()[0]);
        skip_flag_.data<float>()[0] = finite ? 0.0f : 1.0f;
        if (pg_ != nullptr) {
            pg_->all_reduce(skip_flag_, comm::ReduceOp::kMax).wait();
        }
        if (skip_flag_.data<float>()[0] != 0.0f) {
            return StepResult{std::numeric_limits<float>::quiet_NaN(), true};
        }
    }
    model_.sparse_arch().set_learning_rate(sparse_lr);
    model_.backward(grad_logits_);
    if (pg_ != nullptr) {
        all_reduce_gradients(*pg_, model_.parameters(), grad_bucket_);
        pg_->all_reduce(loss_, comm::ReduceOp::kAvg).wait();
    }
    optimizer_.step(model_.parameters(), dense_lr);
    return StepResult{loss_.data<float>()[0]};
}

const Tensor& TrainPipelineBase::predict(const Batch& batch) {
    return model_.forward(batch);
}

Metrics TrainPipelineBase::global_metrics(const MetricsAccumulator& local) const {
    return train::global_metrics(local, pg_.get());
}

}  // namespace shardrec::train
