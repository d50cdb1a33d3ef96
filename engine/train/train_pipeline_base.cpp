#include "engine/train/train_pipeline_base.h"

#include "engine/core/stream.h"
#include "kernels/bce_with_logits.h"

namespace shardrec::train {

TrainPipelineBase::TrainPipelineBase(RecModel& model,
                                     DenseOptimizer& optimizer,
                                     std::shared_ptr<comm::ProcessGroup> pg)
    : model_(model),
      optimizer_(optimizer),
      pg_(std::move(pg)),
      loss_(Tensor::zeros({1}, DType::kF32)) {}

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

StepResult TrainPipelineBase::progress(const Batch& batch, float dense_lr, float sparse_lr) {
    const int64_t B = batch.batch_size();
    if (!grad_logits_.defined() || grad_logits_.numel() != B) {
        grad_logits_ = Tensor::empty({B}, DType::kF32);
    }
    const Tensor& logits = model_.forward(batch);
    kernels::bce_with_logits(logits, batch.labels, loss_, grad_logits_, Stream::cpu());
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
    if (pg_ == nullptr) {
        return local.compute();
    }
    const int world = pg_->size();
    Tensor count = Tensor::from_vector<int64_t>({local.count()});
    std::vector<int64_t> counts(static_cast<size_t>(world));
    Tensor all_counts = Tensor::from_blob(counts.data(), {world}, DType::kI64);
    pg_->all_gather_v(count, all_counts, std::vector<int64_t>(static_cast<size_t>(world), 1))
        .wait();
    int64_t total = 0;
    for (int64_t c : counts) {
        total += c;
    }
    Tensor logits = Tensor::empty({total}, DType::kF32);
    Tensor labels = Tensor::empty({total}, DType::kF32);
    const Tensor my_logits = Tensor::from_vector(local.logits());
    const Tensor my_labels = Tensor::from_vector(local.labels());
    comm::Work a = pg_->all_gather_v(my_logits, logits, counts);
    comm::Work b = pg_->all_gather_v(my_labels, labels, counts);
    a.wait();
    b.wait();
    return compute_metrics(logits.data<float>(), labels.data<float>(), total);
}

}  // namespace shardrec::train
