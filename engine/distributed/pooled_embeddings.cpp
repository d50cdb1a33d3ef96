#include "engine/distributed/pooled_embeddings.h"

#include <functional>
#include <numeric>
#include <utility>

#include "engine/distributed/hierarchical_pooled.h"

namespace shardrec {

using pooled::rows_per_rank;
using pooled::scaled;
using pooled::sum_of;

namespace {

void check_embeddings(const Tensor& t, const char* what) {
    SR_CHECK(t.defined() && t.dtype() == DType::kF32 && t.dim() == 2,
             "{}: needs an f32 [rows, cols] tensor, got {}", what,
             t.defined() ? t.str() : "undefined");
}

// The stream of a module's copies on `device`: the host's, or the module's own CUDA stream.
Stream& copy_stream(std::unique_ptr<Stream>& own, Device device) {
    if (device.is_cpu())
        return Stream::cpu();
    if (own == nullptr || own->device() != device)
        own = std::make_unique<Stream>(device);
    return *own;
}

// A backward's awaitable: its collective, then `decode` (a quantized collective's received
// bytes into grad_in; none for f32), then grad_in divided by the world size when
// gradient_division() is on (in `stream`'s order, finished before the result is returned).
// `input` is the collective's input, kept alive with it.
TensorAwaitable backward_awaitable(comm::Work work,
                                   Tensor input,
                                   Tensor grad_in,
                                   int64_t world,
                                   Stream& stream,
                                   std::function<void()> decode = {}) {
    std::vector<comm::Work> works;
    works.push_back(std::move(work));
    auto finish = [input, grad_in, decode = std::move(decode), divide = gradient_division(), world,
                   s = &stream]() mutable {
        if (decode)
            decode();
        if (divide) {
            divide_by_world(grad_in, world, *s);
            s->synchronize();
        }
        return grad_in;
    };
    return TensorAwaitable(std::move(works), std::move(finish));
}

constexpr kernels::CommType kFp32 = kernels::CommType::kFp32;
constexpr int64_t kF32Bytes = sizeof(float);

// The [rows, cols] block at element `at` of a contiguous f32 tensor, as a view.
Tensor block_view(const Tensor& t, int64_t at, int64_t rows, int64_t cols) {
    return t.view({t.numel()}).slice(at, at + rows * cols).view({rows, cols});
}

// Block [rows, cols] at element `at` of `blocks` -> columns [col, col + cols) of matrix
// [rows, matrix_cols], in the stream's order.
void block_to_columns(const Tensor& blocks,
                      int64_t at,
                      int64_t rows,
                      int64_t cols,
                      Tensor& matrix,
                      int64_t col,
                      Stream& stream) {
    if (rows == 0 || cols == 0)
        return;
    const size_t es = sizeof(float);
    copy_2d_async(matrix.data<float>() + col, static_cast<size_t>(matrix.size(1)) * es,
                  matrix.device(), blocks.data<float>() + at, static_cast<size_t>(cols) * es,
                  blocks.device(), static_cast<size_t>(cols) * es, static_cast<size_t>(rows),
                  stream);
}

// Columns [col, col + cols) of matrix [rows, matrix_cols] -> block [rows, cols] at element `at`
// of `blocks`, in the stream's order.
void columns_to_block(const Tensor& matrix,
                      int64_t col,
                      int64_t rows,
                      int64_t cols,
                      Tensor& blocks,
                      int64_t at,
                      Stream& stream) {
    if (rows == 0 || cols == 0)
        return;
    const size_t es = sizeof(float);
    copy_2d_async(blocks.data<float>() + at, static_cast<size_t>(cols) * es, blocks.device(),
                  matrix.data<float>() + col, static_cast<size_t>(matrix.size(1)) * es,
                  matrix.device(), static_cast<size_t>(cols) * es, static_cast<size_t>(rows),
                  stream);
}

// The bytes of a send to every rank but `me` (`each` bytes apiece) that leave me's node.
std::vector<int64_t> same_to_every_rank(int64_t each, int64_t world) {
    return std::vector<int64_t>(static_cast<size_t>(world), each);
}

}  // namespace

namespace pooled {

int64_t sum_of(const std::vector<int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), int64_t{0});
}

std::vector<int64_t> scaled(const std::vector<int64_t>& v, int64_t factor) {
    std::vector<int64_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        out[i] = v[i] * factor;
    }
    return out;
}

std::vector<int64_t> rows_per_rank(const std::vector<int64_t>& given,
                                   int64_t total,
                                   int64_t world,
                                   const char* what) {
    if (given.empty()) {
        SR_CHECK(total % world == 0, "{}: {} rows do not split evenly over {} ranks", what, total,
                 world);
        return std::vector<int64_t>(static_cast<size_t>(world), total / world);
    }
    SR_CHECK(static_cast<int64_t>(given.size()) == world && sum_of(given) == total,
             "{}: {} row counts summing to {} for {} ranks and {} rows", what, given.size(),
             sum_of(given), world, total);
    for (int64_t r : given) {
        SR_CHECK(r >= 0, "{}: negative row count {}", what, r);
    }
    return given;
}

}  // namespace pooled

// ---- PooledEmbeddingsAllToAll ----

PooledEmbeddingsAllToAll::PooledEmbeddingsAllToAll(std::shared_ptr<comm::ProcessGroup> pg,
                                                   std::vector<int64_t> dim_sum_per_rank,
                                                   QCommsConfig qcomms)
    : pg_(std::move(pg)), qcomms_(qcomms), dim_sum_per_rank_(std::move(dim_sum_per_rank)) {
    SR_CHECK(pg_ != nullptr, "PooledEmbeddingsAllToAll: null process group");
    local_size_ = node_local_size(*pg_);
    SR_CHECK(static_cast<int64_t>(dim_sum_per_rank_.size()) == pg_->size(),
             "PooledEmbeddingsAllToAll: {} dims for a group of {} ranks", dim_sum_per_rank_.size(),
             pg_->size());
    dim_offsets_.assign(1, 0);
    for (int64_t d : dim_sum_per_rank_) {
        SR_CHECK(d >= 0, "PooledEmbeddingsAllToAll: negative dim sum {}", d);
        dim_offsets_.push_back(dim_offsets_.back() + d);
    }
}

TensorAwaitable PooledEmbeddingsAllToAll::start_forward(
    const Tensor& local_embs, const std::vector<int64_t>& batch_size_per_rank) {
    check_embeddings(local_embs, "PooledEmbeddingsAllToAll::forward");
    const int64_t world = pg_->size();
    const int64_t me = pg_->rank();
    SR_CHECK(local_embs.size(1) == dim_sum_per_rank_[me],
             "PooledEmbeddingsAllToAll::forward: local_embs {} but rank {} owns {} columns",
             local_embs.str(), me, dim_sum_per_rank_[me]);
    batch_size_per_rank_ = rows_per_rank(batch_size_per_rank, local_embs.size(0), world,
                                         "PooledEmbeddingsAllToAll::forward");
    const int64_t my_batch = batch_size_per_rank_[me];
    const int64_t total_dim = dim_offsets_.back();
    const Device device = local_embs.device();
    Tensor recv = reuse_buffer(recv_, 1, my_batch * total_dim, DType::kF32, device);
    Tensor out = reuse_buffer(out_, my_batch, total_dim, DType::kF32, device);
    std::vector<comm::Work> works;
    Stream* stream = &copy_stream(stream_, device);
    const kernels::CommType q = qcomms_.forward_precision;
    std::function<void()> decode;
    if (q == kFp32) {
        works.push_back(pg_->all_to_all_v(local_embs,
                                          scaled(batch_size_per_rank_, dim_sum_per_rank_[me]), recv,
                                          scaled(dim_sum_per_rank_, my_batch)));
        sent_bytes_.forward += (local_embs.size(0) - my_batch) * dim_sum_per_rank_[me] * kF32Bytes;
        sent_bytes_.forward_cross_node += cross_node_bytes(
            scaled(batch_size_per_rank_, dim_sum_per_rank_[me] * kF32Bytes), me, local_size_);
    } else {
        // Row b of local_embs (one sample's D_me columns) is one encoded row; the blocks for the
        // ranks are row ranges, so encoding the whole tensor encodes every block.
        const int64_t my_row_bytes = kernels::qcomm_row_bytes(q, dim_sum_per_rank_[me]);
        Tensor send = reuse_byte_buffer(forward_q_.send, local_embs.size(0) * my_row_bytes, device);
        kernels::qcomm_encode(local_embs, q, send, *stream);
        stream->synchronize();  // the collective reads send
        std::vector<int64_t> recv_splits(dim_sum_per_rank_.size());
        for (size_t s = 0; s < recv_splits.size(); ++s)
            recv_splits[s] = my_batch * kernels::qcomm_row_bytes(q, dim_sum_per_rank_[s]);
        Tensor recv_bytes = reuse_byte_buffer(forward_q_.recv, sum_of(recv_splits), device);
        const std::vector<int64_t> send_splits = scaled(batch_size_per_rank_, my_row_bytes);
        works.push_back(pg_->all_to_all_v(send, send_splits, recv_bytes, recv_splits));
        sent_bytes_.forward += send.numel() - send_splits[static_cast<size_t>(me)];
        sent_bytes_.forward_cross_node += cross_node_bytes(send_splits, me, local_size_);
        // Block s of recv_bytes decodes into block s of recv, as the f32 all-to-all leaves it.
        decode = [recv, recv_bytes, recv_splits, q, my_batch, stream, dims = dim_sum_per_rank_,
                  offsets = dim_offsets_]() {
            int64_t at = 0;
            for (size_t s = 0; s < dims.size(); ++s) {
                Tensor block = block_view(recv, my_batch * offsets[s], my_batch, dims[s]);
                kernels::qcomm_decode(recv_bytes.slice(at, at + recv_splits[s]), q, block, *stream);
                at += recv_splits[s];
            }
        };
    }
    // Block s of recv is [my_batch, D_s] from rank s; it becomes columns dim_offsets[s]...
    auto finish = [recv, out, local_embs, my_batch, stream, decode, dims = dim_sum_per_rank_,
                   offsets = dim_offsets_]() mutable {
        if (decode)
            decode();
        for (size_t s = 0; s < dims.size(); ++s)
            block_to_columns(recv, my_batch * offsets[s], my_batch, dims[s], out, offsets[s],
                             *stream);
        stream->synchronize();  // the result is ready on every stream
        return out;
    };
    return TensorAwaitable(std::move(works), std::move(finish));
}

Tensor PooledEmbeddingsAllToAll::forward(const Tensor& local_embs,
                                         const std::vector<int64_t>& batch_size_per_rank) {
    return start_forward(local_embs, batch_size_per_rank).wait();
}

TensorAwaitable PooledEmbeddingsAllToAll::start_backward(const Tensor& grad_output) {
    check_embeddings(grad_output, "PooledEmbeddingsAllToAll::backward");
    SR_CHECK(!batch_size_per_rank_.empty(), "PooledEmbeddingsAllToAll::backward before forward");
    const int64_t world = pg_->size();
    const int64_t me = pg_->rank();
    const int64_t my_batch = batch_size_per_rank_[me];
    const int64_t total_dim = dim_offsets_.back();
    SR_CHECK(grad_output.size(0) == my_batch && grad_output.size(1) == total_dim,
             "PooledEmbeddingsAllToAll::backward: grad_output {} for batch {} x {} columns",
             grad_output.str(), my_batch, total_dim);
    // TorchRec _recat_pooled_embedding_grad_out: rank s's columns become one contiguous block.
    const Device device = grad_output.device();
    Stream* stream = &copy_stream(stream_, device);
    Tensor send = reuse_buffer(grad_send_, 1, my_batch * total_dim, DType::kF32, device);
    for (int64_t s = 0; s < world; ++s) {
        columns_to_block(grad_output, dim_offsets_[s], my_batch, dim_sum_per_rank_[s], send,
                         my_batch * dim_offsets_[s], *stream);
    }
    const int64_t global_batch = sum_of(batch_size_per_rank_);
    Tensor grad_in =
        reuse_buffer(grad_in_, global_batch, dim_sum_per_rank_[me], DType::kF32, device);
    const kernels::CommType q = qcomms_.backward_precision;
    if (q == kFp32) {
        stream->synchronize();  // the collective reads send
        sent_bytes_.backward += (total_dim - dim_sum_per_rank_[me]) * my_batch * kF32Bytes;
        sent_bytes_.backward_cross_node +=
            cross_node_bytes(scaled(dim_sum_per_rank_, my_batch * kF32Bytes), me, local_size_);
        return backward_awaitable(
            pg_->all_to_all_v(send, scaled(dim_sum_per_rank_, my_batch), grad_in,
                              scaled(batch_size_per_rank_, dim_sum_per_rank_[me])),
            send, grad_in, world, *stream);
    }
    // Block s of send ([my_batch, D_s], rank s's gradients) is encoded row by row: a row is one
    // sample's columns of rank s's block, as in the forward.
    std::vector<int64_t> send_splits(static_cast<size_t>(world));
    for (int64_t s = 0; s < world; ++s)
        send_splits[static_cast<size_t>(s)] =
            my_batch * kernels::qcomm_row_bytes(q, dim_sum_per_rank_[s]);
    Tensor send_bytes = reuse_byte_buffer(backward_q_.send, sum_of(send_splits), device);
    int64_t at = 0;
    for (int64_t s = 0; s < world; ++s) {
        Tensor bytes = send_bytes.slice(at, at + send_splits[static_cast<size_t>(s)]);
        kernels::qcomm_encode(
            block_view(send, my_batch * dim_offsets_[s], my_batch, dim_sum_per_rank_[s]), q, bytes,
            *stream);
        at += send_splits[static_cast<size_t>(s)];
    }
    stream->synchronize();  // the collective reads send_bytes
    const int64_t my_row_bytes = kernels::qcomm_row_bytes(q, dim_sum_per_rank_[me]);
    Tensor recv_bytes = reuse_byte_buffer(backward_q_.recv, global_batch * my_row_bytes, device);
    sent_bytes_.backward += send_bytes.numel() - send_splits[static_cast<size_t>(me)];
    sent_bytes_.backward_cross_node += cross_node_bytes(send_splits, me, local_size_);
    return backward_awaitable(pg_->all_to_all_v(send_bytes, send_splits, recv_bytes,
                                                scaled(batch_size_per_rank_, my_row_bytes)),
                              send_bytes, grad_in, world, *stream,
                              [recv_bytes, grad_in, q, stream]() mutable {
                                  kernels::qcomm_decode(recv_bytes, q, grad_in, *stream);
                              });
}

Tensor PooledEmbeddingsAllToAll::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

// ---- PooledEmbeddingsReduceScatter ----

PooledEmbeddingsReduceScatter::PooledEmbeddingsReduceScatter(std::shared_ptr<comm::ProcessGroup> pg,
                                                             QCommsConfig qcomms)
    : pg_(std::move(pg)), qcomms_(qcomms) {
    SR_CHECK(pg_ != nullptr, "PooledEmbeddingsReduceScatter: null process group");
    local_size_ = node_local_size(*pg_);
}

TensorAwaitable PooledEmbeddingsReduceScatter::start_forward(
    const Tensor& local_embs, const std::vector<int64_t>& input_splits) {
    check_embeddings(local_embs, "PooledEmbeddingsReduceScatter::forward");
    input_splits_ = rows_per_rank(input_splits, local_embs.size(0), pg_->size(),
                                  "PooledEmbeddingsReduceScatter::forward");
    dim_ = local_embs.size(1);
    Tensor out =
        reuse_buffer(out_, input_splits_[pg_->rank()], dim_, DType::kF32, local_embs.device());
    std::vector<comm::Work> works;
    const kernels::CommType q = qcomms_.forward_precision;
    if (q == kFp32) {
        works.push_back(pg_->reduce_scatter_v(local_embs, scaled(input_splits_, dim_), out,
                                              comm::ReduceOp::kSum));
        sent_bytes_.forward += (local_embs.size(0) - out.size(0)) * dim_ * kF32Bytes;
        sent_bytes_.forward_cross_node +=
            cross_node_bytes(scaled(input_splits_, dim_ * kF32Bytes), pg_->rank(), local_size_);
        return TensorAwaitable(std::move(works), [local_embs, out]() { return out; });
    }
    // The blocks travel encoded (an all-to-all) and are added in f32 after decoding: a row is
    // one sample's partial sums for the D columns.
    QuantizedCollective c =
        quantized_reduce_scatter(*pg_, local_embs, input_splits_, q, out, forward_q_,
                                 copy_stream(stream_, local_embs.device()));
    sent_bytes_.forward += c.bytes_sent;
    sent_bytes_.forward_cross_node += cross_node_bytes(
        scaled(input_splits_, kernels::qcomm_row_bytes(q, dim_)), pg_->rank(), local_size_);
    works.push_back(std::move(c.work));
    return TensorAwaitable(std::move(works), [local_embs, out, finish = std::move(c.finish)]() {
        finish();
        return out;
    });
}

Tensor PooledEmbeddingsReduceScatter::forward(const Tensor& local_embs,
                                              const std::vector<int64_t>& input_splits) {
    return start_forward(local_embs, input_splits).wait();
}

TensorAwaitable PooledEmbeddingsReduceScatter::start_backward(const Tensor& grad_output) {
    check_embeddings(grad_output, "PooledEmbeddingsReduceScatter::backward");
    SR_CHECK(!input_splits_.empty(), "PooledEmbeddingsReduceScatter::backward before forward");
    SR_CHECK(grad_output.size(0) == input_splits_[pg_->rank()] && grad_output.size(1) == dim_,
             "PooledEmbeddingsReduceScatter::backward: grad_output {} for [{}, {}]",
             grad_output.str(), input_splits_[pg_->rank()], dim_);
    const Device device = grad_output.device();
    Tensor grad_in = reuse_buffer(grad_in_, sum_of(input_splits_), dim_, DType::kF32, device);
    Stream& stream = copy_stream(stream_, device);
    const kernels::CommType q = qcomms_.backward_precision;
    if (q == kFp32) {
        sent_bytes_.backward += grad_output.numel() * kF32Bytes * (pg_->size() - 1);
        sent_bytes_.backward_cross_node +=
            cross_node_bytes(same_to_every_rank(grad_output.numel() * kF32Bytes, pg_->size()),
                             pg_->rank(), local_size_);
        return backward_awaitable(
            pg_->all_gather_v(grad_output, grad_in, scaled(input_splits_, dim_)), grad_output,
            grad_in, pg_->size(), stream);
    }
    QuantizedCollective c =
        quantized_all_gather(*pg_, grad_output, input_splits_, q, grad_in, backward_q_, stream);
    sent_bytes_.backward += c.bytes_sent;
    sent_bytes_.backward_cross_node += cross_node_bytes(
        same_to_every_rank(grad_output.size(0) * kernels::qcomm_row_bytes(q, dim_), pg_->size()),
        pg_->rank(), local_size_);
    return backward_awaitable(std::move(c.work), grad_output, grad_in, pg_->size(), stream,
                              std::move(c.finish));
}

Tensor PooledEmbeddingsReduceScatter::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

// ---- PooledEmbeddingsAllGather ----

PooledEmbeddingsAllGather::PooledEmbeddingsAllGather(std::shared_ptr<comm::ProcessGroup> pg,
                                                     QCommsConfig qcomms)
    : pg_(std::move(pg)), qcomms_(qcomms) {
    SR_CHECK(pg_ != nullptr, "PooledEmbeddingsAllGather: null process group");
    local_size_ = node_local_size(*pg_);
}

TensorAwaitable PooledEmbeddingsAllGather::start_forward(
    const Tensor& local_embs, const std::vector<int64_t>& batch_size_per_rank) {
    check_embeddings(local_embs, "PooledEmbeddingsAllGather::forward");
    const int64_t world = pg_->size();
    const int64_t my_batch = local_embs.size(0);
    batch_size_per_rank_ = batch_size_per_rank.empty()
                               ? std::vector<int64_t>(static_cast<size_t>(world), my_batch)
                               : batch_size_per_rank;
    SR_CHECK(static_cast<int64_t>(batch_size_per_rank_.size()) == world &&
                 batch_size_per_rank_[pg_->rank()] == my_batch,
             "PooledEmbeddingsAllGather::forward: batch sizes [{}] for {} ranks, mine is {}",
             fmt::join(batch_size_per_rank_, ", "), world, my_batch);
    dim_ = local_embs.size(1);
    Tensor out =
        reuse_buffer(out_, sum_of(batch_size_per_rank_), dim_, DType::kF32, local_embs.device());
    std::vector<comm::Work> works;
    const kernels::CommType q = qcomms_.forward_precision;
    if (q == kFp32) {
        works.push_back(pg_->all_gather_v(local_embs, out, scaled(batch_size_per_rank_, dim_)));
        sent_bytes_.forward += local_embs.numel() * kF32Bytes * (world - 1);
        sent_bytes_.forward_cross_node += cross_node_bytes(
            same_to_every_rank(local_embs.numel() * kF32Bytes, world), pg_->rank(), local_size_);
        return TensorAwaitable(std::move(works), [local_embs, out]() { return out; });
    }
    QuantizedCollective c =
        quantized_all_gather(*pg_, local_embs, batch_size_per_rank_, q, out, forward_q_,
                             copy_stream(stream_, local_embs.device()));
    sent_bytes_.forward += c.bytes_sent;
    sent_bytes_.forward_cross_node +=
        cross_node_bytes(same_to_every_rank(my_batch * kernels::qcomm_row_bytes(q, dim_), world),
                         pg_->rank(), local_size_);
    works.push_back(std::move(c.work));
    return TensorAwaitable(std::move(works), [local_embs, out, finish = std::move(c.finish)]() {
        finish();
        return out;
    });
}

Tensor PooledEmbeddingsAllGather::forward(const Tensor& local_embs,
                                          const std::vector<int64_t>& batch_size_per_rank) {
    return start_forward(local_embs, batch_size_per_rank).wait();
}

TensorAwaitable PooledEmbeddingsAllGather::start_backward(const Tensor& grad_output) {
    check_embeddings(grad_output, "PooledEmbeddingsAllGather::backward");
    SR_CHECK(!batch_size_per_rank_.empty(), "PooledEmbeddingsAllGather::backward before forward");
    SR_CHECK(grad_output.size(0) == sum_of(batch_size_per_rank_) && grad_output.size(1) == dim_,
             "PooledEmbeddingsAllGather::backward: grad_output {} for [{}, {}]", grad_output.str(),
             sum_of(batch_size_per_rank_), dim_);
    const Device device = grad_output.device();
    Tensor grad_in =
        reuse_buffer(grad_in_, batch_size_per_rank_[pg_->rank()], dim_, DType::kF32, device);
    Stream& stream = copy_stream(stream_, device);
    const kernels::CommType q = qcomms_.backward_precision;
    if (q == kFp32) {
        sent_bytes_.backward += (grad_output.size(0) - grad_in.size(0)) * dim_ * kF32Bytes;
        sent_bytes_.backward_cross_node += cross_node_bytes(
            scaled(batch_size_per_rank_, dim_ * kF32Bytes), pg_->rank(), local_size_);
        return backward_awaitable(
            pg_->reduce_scatter_v(grad_output, scaled(batch_size_per_rank_, dim_), grad_in,
                                  comm::ReduceOp::kSum),
            grad_output, grad_in, pg_->size(), stream);
    }
    // The gradient blocks travel encoded and are added in f32 after decoding.
    QuantizedCollective c = quantized_reduce_scatter(*pg_, grad_output, batch_size_per_rank_, q,
                                                     grad_in, backward_q_, stream);
    sent_bytes_.backward += c.bytes_sent;
    sent_bytes_.backward_cross_node += cross_node_bytes(
        scaled(batch_size_per_rank_, kernels::qcomm_row_bytes(q, dim_)), pg_->rank(), local_size_);
    return backward_awaitable(std::move(c.work), grad_output, grad_in, pg_->size(), stream,
                              std::move(c.finish));
}

Tensor PooledEmbeddingsAllGather::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

}  // namespace shardrec
