// TrainPipelineBase: one batch at a time, no overlap (TorchRec's reference pipeline). Each
// progress() runs forward, loss, backward (the fused embedding optimizer updates rows inside it)
// and the dense optimizer step. With a process group the dense layers are data parallel: their
// gradients are averaged over the ranks in one bucketed all-reduce before the step, and the loss
// reported is the global mean. Pipelines with overlap must give exactly its numbers.
// On a CUDA device the model's work runs on the pipeline's compute stream, and the loss and logits
// are read back. The dense gradients on the device are averaged by one all-reduce of a device
// bucket over device_pg (NCCL, or MPI through staging copies: comm::device_process_group; a
// StagedProcessGroup over pg when none is given); host parameters (position weights) through a
// host bucket over pg.
#pragma once

#include <memory>
#include <optional>

#include "comm/process_group.h"
#include "engine/core/pinned_buffer.h"
#include "engine/core/stream.h"
#include "engine/distributed/quantized_comm.h"
#include "engine/modules/model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/sparse/batch.h"
#include "engine/train/metrics.h"

namespace shardrec::train {

// A host batch's dense features and labels copied to a CUDA device through pinned staging
// (HostToDeviceStager); the KJT stays on the host. stage() fills the staging, end() enqueues the
// copies; the returned batch holds its values once the stream passes them.
class BatchStager {
public:
    explicit BatchStager(Device device) : stager_(device) {}

    Batch stage(const Batch& host);

    void end(Stream& stream) { stager_.end(stream); }

private:
    HostToDeviceStager stager_;
    Tensor dense_buf_, labels_buf_;  // the device batch's storage, grow-only
};

struct StepResult {
    float loss = 0;        // mean BCE over the batch (NaN when skipped)
    bool skipped = false;  // skip_non_finite: the batch changed no parameter on any rank
};

class TrainPipelineBase {
public:
    // pg: the ranks the dense layers are replicated over (nullptr: one process). device: where
    // the model's dense layers are (RecModel::move_dense_to).
    TrainPipelineBase(RecModel& model,
                      DenseOptimizer& optimizer,
                      std::shared_ptr<comm::ProcessGroup> pg = nullptr,
                      Device device = Device::cpu(),
                      std::shared_ptr<comm::ProcessGroup> device_pg = nullptr);

    // input_finite: the caller's check of the dense features and labels (BatchChecker).
    StepResult progress(const Batch& batch,
                        float dense_lr,
                        float sparse_lr,
                        bool input_finite = true);

    // runtime.nan_policy skip_batch: after the forward, before anything changes, the ranks agree
    // in one all-reduce whether any saw a non-finite input or loss; if so every rank skips the
    // backward and both optimizer steps, so the replicas stay identical.
    void set_skip_non_finite(bool skip) { skip_non_finite_ = skip; }

    // The precision of the dense gradients' all-reduce (comm.allreduce_precision): fp32, or fp16
    // / bf16 values on the wire, summed in f32 (engine/distributed/quantized_comm.h).
    void set_allreduce_precision(kernels::CommType type) { allreduce_precision_ = type; }

    // Forward only (evaluation): logits [B] on the host, valid until the next call.
    const Tensor& predict(const Batch& batch);

    Device device() const { return device_; }

    Stream& stream() { return stream_; }  // the compute stream

    // Metrics over every rank's (logit, label) pairs, the same on every rank.
    Metrics global_metrics(const MetricsAccumulator& local) const;

private:
    RecModel& model_;
    DenseOptimizer& optimizer_;
    std::shared_ptr<comm::ProcessGroup> pg_;
    Device device_;
    Stream stream_;
    std::shared_ptr<comm::ProcessGroup> device_pg_;  // NCCL over pg_'s ranks, or nullptr
    Tensor grad_bucket_;         // the host path's dense gradients, flattened, for one all-reduce
    Tensor device_grad_bucket_;  // device_pg_: the device gradients, flattened
    kernels::CommType allreduce_precision_ = kernels::CommType::kFp32;
    QuantizedBuffers allreduce_buffers_, device_allreduce_buffers_;
    Tensor loss_;       // [1] on device_
    Tensor host_loss_;  // [1]: loss_ read back (loss_ itself on the cpu)
    // CUDA: loss_ copied in the compute stream's order to pinned memory, so that the host reads
    // it once the forward is done (loss_ready_) without waiting for the backward and optimizer.
    PinnedHostBuffer loss_staging_;
    Event loss_ready_;
    Tensor host_logits_;  // predict(): the logits read back from a CUDA device
    Batch device_batch_;  // a host batch's dense features and labels copied to device_
    std::optional<BatchStager> stager_;  // CUDA: those copies

    // `batch` with its dense features and labels on device_ (copied in the stream's order when
    // they are on the host; the sparse features stay on the host).
    const Batch& on_device(const Batch& batch);
    Tensor skip_flag_;  // [1]: 1 when this rank wants the batch skipped (max over ranks)
    bool skip_non_finite_ = false;
    Tensor grad_logits_;  // [B], reused while B is unchanged
};

}  // namespace shardrec::train
