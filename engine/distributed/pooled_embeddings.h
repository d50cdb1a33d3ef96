// The output dists of pooled embeddings (TorchRec dist_data): PooledEmbeddingsAllToAll (table-
// and column-wise: every rank gets all features for its own batch), PooledEmbeddingsReduceScatter
// (row-wise: the partial sums of every shard are added), and PooledEmbeddingsAllGather. Each has
// forward and backward (the adjoint collective: all-to-all <-> all-to-all, reduce-scatter <->
// all-gather); backward divides by the group size when gradient_division() is on, as TorchRec.
// start_* issue the collective and return a TensorAwaitable; forward/backward wait at once.
// Buffers are cached per module: a result tensor is reused by the next call of the same
// direction (copy it to keep it), so only one forward and one backward may be in flight per
// module. f32 tensors on the process group's device: the host (MPI), or a CUDA device (NCCL, or
// MPI through staging copies); their writers must be done when a call starts (synchronise the
// stream), and a result is ready on every stream when wait() returns. Letters: B batch, D
// embedding columns.
// Quantized comms (TorchRec QCommsConfig): with a forward or backward precision other than fp32,
// the values (forward) or gradients (backward) travel encoded (kernels/qcomm_codec.h) and are
// decoded to f32 on arrival; an fp8 row, the unit of one scale, is one sample's columns of one
// rank's block. Sums (the reduce-scatter, and the all-gather's backward) are taken after
// decoding, in f32 (engine/distributed/quantized_comm.h). fp32 runs the f32 collectives as
// they are, bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/distributed/comm_ops.h"
#include "engine/distributed/quantized_comm.h"
#include "kernels/qcomm_codec.h"

namespace shardrec {

// Split arithmetic shared by the flat and the hierarchical output dists.
namespace pooled {
int64_t sum_of(const std::vector<int64_t>& v);
std::vector<int64_t> scaled(const std::vector<int64_t>& v, int64_t factor);
// The rows per rank: `given` when not empty (checked against total), else total / world each.
std::vector<int64_t> rows_per_rank(const std::vector<int64_t>& given,
                                   int64_t total,
                                   int64_t world,
                                   const char* what);
}  // namespace pooled

// TorchRec QCommsConfig: the precision of the pooled values a collective sends (forward) and of
// the gradients its backward sends back.
struct QCommsConfig {
    kernels::CommType forward_precision = kernels::CommType::kFp32;
    kernels::CommType backward_precision = kernels::CommType::kFp32;
};

// The bytes a module's collectives sent from this rank to the other ranks since it was built
// (its own block, which stays on the rank, is not counted), per direction; *_cross_node: the
// part that went to ranks on other nodes (nodes of process_info's local size).
struct CommBytes {
    int64_t forward = 0;
    int64_t backward = 0;
    int64_t forward_cross_node = 0;
    int64_t backward_cross_node = 0;
};

class PooledEmbeddingsAllToAll {
public:
    // dim_sum_per_rank[r]: the embedding columns rank r computes (D_r; 0 for a rank without
    // tables), the same on every rank.
    PooledEmbeddingsAllToAll(std::shared_ptr<comm::ProcessGroup> pg,
                             std::vector<int64_t> dim_sum_per_rank,
                             QCommsConfig qcomms = {});

    // local_embs [B_global, D_mine] f32: rows [sum_{r' < r} B_r', + B_r) are rank r's samples
    // (the KJTAllToAll output batch order). batch_size_per_rank [world] sums to B_global; empty
    // means B_global / world each (which must divide). Result [B_mine, sum D_r] f32: rank s's
    // columns at [sum_{s' < s} D_s', + D_s), in source-rank order.
    TensorAwaitable start_forward(const Tensor& local_embs,
                                  const std::vector<int64_t>& batch_size_per_rank = {});
    Tensor forward(const Tensor& local_embs, const std::vector<int64_t>& batch_size_per_rank = {});

    // grad_output [B_mine, sum D_r] f32 -> [B_global, D_mine] f32 for the latest forward's batch
    // sizes (the reverse all-to-all), divided by world size when gradient_division().
    TensorAwaitable start_backward(const Tensor& grad_output);
    Tensor backward(const Tensor& grad_output);

    const std::vector<int64_t>& dim_sum_per_rank() const { return dim_sum_per_rank_; }

    // The latest forward's batch size per rank (empty before the first forward).
    const std::vector<int64_t>& batch_size_per_rank() const { return batch_size_per_rank_; }

    const CommBytes& sent_bytes() const { return sent_bytes_; }

private:
    std::shared_ptr<comm::ProcessGroup> pg_;
    QCommsConfig qcomms_;
    CommBytes sent_bytes_;
    int local_size_ = 1;  // ranks per node, for the cross-node bytes
    QuantizedBuffers forward_q_, backward_q_;
    std::vector<int64_t> dim_sum_per_rank_;
    std::vector<int64_t> dim_offsets_;  // [world + 1] column offsets in the output
    std::vector<int64_t> batch_size_per_rank_;
    Tensor recv_, out_, grad_send_, grad_in_;
    std::unique_ptr<Stream> stream_;  // the copies on a CUDA device
};

class PooledEmbeddingsReduceScatter {
public:
    explicit PooledEmbeddingsReduceScatter(std::shared_ptr<comm::ProcessGroup> pg,
                                           QCommsConfig qcomms = {});

    // local_embs [sum input_splits, D] f32, bucket-major: row block r (input_splits[r] rows) is
    // this rank's partial result for rank r's samples. input_splits [world] rows (the same on
    // every rank; a variable batch per rank); empty means rows / world each. Result
    // [input_splits[rank], D] f32: the sum over ranks of their block for me.
    TensorAwaitable start_forward(const Tensor& local_embs,
                                  const std::vector<int64_t>& input_splits = {});
    Tensor forward(const Tensor& local_embs, const std::vector<int64_t>& input_splits = {});

    // grad_output [input_splits[rank], D] f32 -> [sum input_splits, D] f32: block r is rank r's
    // grad_output (an all-gather), divided by world size when gradient_division() (TorchRec
    // ReduceScatter backward: "equivalent to running on a single rank").
    TensorAwaitable start_backward(const Tensor& grad_output);
    Tensor backward(const Tensor& grad_output);

    const CommBytes& sent_bytes() const { return sent_bytes_; }

private:
    std::shared_ptr<comm::ProcessGroup> pg_;
    QCommsConfig qcomms_;
    CommBytes sent_bytes_;
    int local_size_ = 1;  // ranks per node, for the cross-node bytes
    QuantizedBuffers forward_q_, backward_q_;
    std::vector<int64_t> input_splits_;  // rows, of the latest forward
    int64_t dim_ = 0;
    Tensor out_, grad_in_;
    std::unique_ptr<Stream> stream_;  // gradient division on a CUDA device
};

class PooledEmbeddingsAllGather {
public:
    explicit PooledEmbeddingsAllGather(std::shared_ptr<comm::ProcessGroup> pg,
                                       QCommsConfig qcomms = {});

    // local_embs [B_mine, D] f32 -> [sum B_r, D] f32 with rank r's rows at block r.
    // batch_size_per_rank [world] (B_r, the same on every rank); empty means B_mine everywhere.
    TensorAwaitable start_forward(const Tensor& local_embs,
                                  const std::vector<int64_t>& batch_size_per_rank = {});
    Tensor forward(const Tensor& local_embs, const std::vector<int64_t>& batch_size_per_rank = {});

    // grad_output [sum B_r, D] f32 -> [B_mine, D] f32: the sum over ranks of their block r = me
    // (a reduce-scatter), divided by world size when gradient_division() (TorchRec AllGather
    // backward).
    TensorAwaitable start_backward(const Tensor& grad_output);
    Tensor backward(const Tensor& grad_output);

    const CommBytes& sent_bytes() const { return sent_bytes_; }

private:
    std::shared_ptr<comm::ProcessGroup> pg_;
    QCommsConfig qcomms_;
    CommBytes sent_bytes_;
    int local_size_ = 1;  // ranks per node, for the cross-node bytes
    QuantizedBuffers forward_q_, backward_q_;
    std::vector<int64_t> batch_size_per_rank_;  // of the latest forward
    int64_t dim_ = 0;
    Tensor out_, grad_in_;
    std::unique_ptr<Stream> stream_;  // gradient division on a CUDA device
};

}  // namespace shardrec
