#include "engine/train/train_pipeline_base.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "comm/staged_process_group.h"
#include "engine/core/profile.h"
#include "engine/core/stream.h"
#include "kernels/bce_with_logits.h"

namespace shardrec::train {

Batch BatchStager::stage(const Batch& host) {
    stager_.begin(HostToDeviceStager::padded_bytes(host.dense) +
                  HostToDeviceStager::padded_bytes(host.labels));
    Tensor dense = stager_.copy(dense_buf_, host.dense);
    Tensor labels = stager_.copy(labels_buf_, host.labels);
    return Batch{std::move(dense), host.sparse, std::move(labels)};
}

TrainPipelineBase::TrainPipelineBase(RecModel& model,
                                     DenseOptimizer& optimizer,
                                     std::shared_ptr<comm::ProcessGroup> pg,
                                     Device device,
                                     std::shared_ptr<comm::ProcessGroup> device_pg)
    : model_(model),
      optimizer_(optimizer),
      pg_(std::move(pg)),
      device_(device),
      stream_(device),
      device_pg_(std::move(device_pg)),
      loss_(Tensor::zeros({1}, DType::kF32, device)),
      host_loss_(device.is_cpu() ? loss_ : Tensor::zeros({1}, DType::kF32)),
      loss_ready_(device),
      skip_flag_(Tensor::zeros({1}, DType::kF32)) {
    if (device.is_cuda())
        loss_staging_.reserve(sizeof(float));
    if (device.is_cuda() && pg_ != nullptr && device_pg_ == nullptr)
        device_pg_ = std::make_shared<comm::StagedProcessGroup>(pg_);
}

namespace {

// Averages the gradients of `params` over the ranks of `pg` through one flat buffer on
// `bucket_device` (the host for MPI, the GPU for NCCL), the copies in `stream`'s order; with a
// 16-bit `precision` the values travel encoded and are summed in f32 (quantized_all_reduce_mean),
// the same result on every rank.
void all_reduce_gradients(comm::ProcessGroup& pg,
                          const std::vector<Parameter*>& params,
                          Tensor& bucket,
                          Device bucket_device,
                          kernels::CommType precision,
                          QuantizedBuffers& buffers,
                          Stream& stream) {
    int64_t n = 0;
    for (const Parameter* p : params)
        n += p->grad.numel();
    if (n == 0)
        return;
    if (!bucket.defined() || bucket.numel() != n || bucket.device() != bucket_device)
        bucket = Tensor::empty({n}, DType::kF32, bucket_device);
    float* b = bucket.data<float>();
    for (const Parameter* p : params) {
        copy_async(b, bucket_device, p->grad.data_ptr(), p->grad.device(), p->grad.nbytes(),
                   stream);
        b += p->grad.numel();
    }
    stream.synchronize();  // the group runs on its own stream (or the host)
    if (precision == kernels::CommType::kFp32) {
        pg.all_reduce(bucket, comm::ReduceOp::kAvg).wait();
    } else {
        quantized_all_reduce_mean(pg, bucket, precision, buffers, stream);
    }
    const float* src = bucket.data<float>();
    for (Parameter* p : params) {
        copy_async(p->grad.data_ptr(), p->grad.device(), src, bucket_device, p->grad.nbytes(),
                   stream);
        src += p->grad.numel();
    }
}

}  // namespace

const Batch& TrainPipelineBase::on_device(const Batch& batch) {
    if (batch.dense.device() == device_)
        return batch;
    if (!stager_)
        stager_.emplace(device_);
    device_batch_ = stager_->stage(batch);
    stager_->end(stream_);
    return device_batch_;
}

StepResult TrainPipelineBase::progress(const Batch& host_or_device_batch,
                                       float dense_lr,
                                       float sparse_lr,
                                       bool input_finite) {
    const Batch& batch = on_device(host_or_device_batch);
    const int64_t B = batch.batch_size();
    if (!grad_logits_.defined() || grad_logits_.numel() != B) {
        grad_logits_ = Tensor::empty({B}, DType::kF32, device_);
    }
    const Tensor& logits = profile::timed(
        "forward", stream_, [&]() -> const Tensor& { return model_.forward(batch, stream_); });
    {
        profile::Range r("loss", stream_);
        kernels::bce_with_logits(logits, batch.labels, loss_, grad_logits_, stream_);
    }
    bool loss_read = device_.is_cpu();
    auto read_loss = [&] {  // the host's loss, once the forward is done
        if (loss_read)
            return;
        loss_ready_.synchronize();
        std::memcpy(host_loss_.data_ptr(), loss_staging_.data(), sizeof(float));
        loss_read = true;
    };
    if (device_.is_cuda()) {
        copy_async(loss_staging_.data(), Device::cpu(), loss_.data_ptr(), device_, sizeof(float),
                   stream_);
        loss_ready_.record(stream_);
    }
    if (skip_non_finite_) {
        read_loss();
        const bool finite = input_finite && std::isfinite(host_loss_.data<float>()[0]);
        skip_flag_.data<float>()[0] = finite ? 0.0f : 1.0f;
        if (pg_ != nullptr) {
            pg_->all_reduce(skip_flag_, comm::ReduceOp::kMax).wait();
        }
        if (skip_flag_.data<float>()[0] != 0.0f) {
            return StepResult{std::numeric_limits<float>::quiet_NaN(), true};
        }
    }
    model_.sparse_arch().set_learning_rate(sparse_lr);
    {
        profile::Range r("backward", stream_);
        model_.backward(grad_logits_, stream_);
    }
    if (pg_ != nullptr) {
        profile::Range r("all_reduce", stream_);  // the dense gradients and the loss
        std::vector<Parameter*> host_params, device_params;
        for (Parameter* p : model_.parameters()) {
            const bool on_device = device_.is_cuda() && p->grad.device() == device_;
            (on_device ? device_params : host_params).push_back(p);
        }
        if (device_pg_ != nullptr) {
            all_reduce_gradients(*device_pg_, device_params, device_grad_bucket_, device_,
                                 allreduce_precision_, device_allreduce_buffers_, stream_);
        }
        all_reduce_gradients(*pg_, host_params, grad_bucket_, Device::cpu(), allreduce_precision_,
                             allreduce_buffers_, stream_);
        read_loss();
        pg_->all_reduce(host_loss_, comm::ReduceOp::kAvg).wait();
    }
    {
        profile::Range r("dense_optimizer", stream_);
        optimizer_.step(model_.parameters(), dense_lr, stream_);
    }
    read_loss();  // the backward and optimizer may still run on the device
    return StepResult{host_loss_.data<float>()[0]};
}

const Tensor& TrainPipelineBase::predict(const Batch& batch) {
    const Tensor& logits = model_.forward(on_device(batch), stream_);
    if (device_.is_cpu())
        return logits;
    stream_.synchronize();
    if (!host_logits_.defined() || host_logits_.shape() != logits.shape())
        host_logits_ = Tensor::empty(logits.shape(), DType::kF32);
    host_logits_.copy_from(logits);
    return host_logits_;
}

Metrics TrainPipelineBase::global_metrics(const MetricsAccumulator& local) const {
    return train::global_metrics(local, pg_.get());
}

}  // namespace shardrec::train
