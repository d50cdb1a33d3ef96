#include "engine/distributed/pooled_embeddings.h"

#include <numeric>
#include <utility>

namespace shardrec {
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

// A backward's awaitable: its collective, then grad_in divided by the world size when
// gradient_division() is on (in `stream`'s order, finished before the result is returned).
// `input` is the collective's input, kept alive with it.
TensorAwaitable backward_awaitable(
    comm::Work work, Tensor input, Tensor grad_in, int64_t world, Stream& stream) {
    std::vector<comm::Work> works;
    works.push_back(std::move(work));
    auto finish = [input, grad_in, divide = gradient_division(), world, s = &stream]() mutable {
        if (divide) {
            divide_by_world(grad_in, world, *s);
            s->synchronize();
        }
        return grad_in;
    };
    return TensorAwaitable(std::move(works), std::move(finish));
}

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

// The rows per rank: `given` when not empty (checked against total), else total / world each.
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

}  // namespace

// ---- PooledEmbeddingsAllToAll ----

PooledEmbeddingsAllToAll::PooledEmbeddingsAllToAll(std::shared_ptr<comm::ProcessGroup> pg,
                                                   std::vector<int64_t> dim_sum_per_rank)
    : pg_(std::move(pg)), dim_sum_per_rank_(std::move(dim_sum_per_rank)) {
    SR_CHECK(pg_ != nullptr, "PooledEmbeddingsAllToAll: null process group");
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
    works.push_back(pg_->all_to_all_v(local_embs,
                                      scaled(batch_size_per_rank_, dim_sum_per_rank_[me]), recv,
                                      scaled(dim_sum_per_rank_, my_batch)));
    // Block s of recv is [my_batch, D_s] from rank s; it becomes columns dim_offsets[s]...
    Stream* stream = &copy_stream(stream_, device);
    auto finish = [recv, out, local_embs, my_batch, stream, dims = dim_sum_per_rank_,
                   offsets = dim_offsets_]() mutable {
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
    stream->synchronize();  // the collective reads send
    const int64_t global_batch = sum_of(batch_size_per_rank_);
    Tensor grad_in =
        reuse_buffer(grad_in_, global_batch, dim_sum_per_rank_[me], DType::kF32, device);
    return backward_awaitable(
        pg_->all_to_all_v(send, scaled(dim_sum_per_rank_, my_batch), grad_in,
                          scaled(batch_size_per_rank_, dim_sum_per_rank_[me])),
        send, grad_in, world, *stream);
}

Tensor PooledEmbeddingsAllToAll::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

// ---- PooledEmbeddingsReduceScatter ----

PooledEmbeddingsReduceScatter::PooledEmbeddingsReduceScatter(std::shared_ptr<comm::ProcessGroup> pg)
    : pg_(std::move(pg)) {
    SR_CHECK(pg_ != nullptr, "PooledEmbeddingsReduceScatter: null process group");
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
    works.push_back(
        pg_->reduce_scatter_v(local_embs, scaled(input_splits_, dim_), out, comm::ReduceOp::kSum));
    return TensorAwaitable(std::move(works), [local_embs, out]() { return out; });
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
    return backward_awaitable(pg_->all_gather_v(grad_output, grad_in, scaled(input_splits_, dim_)),
                              grad_output, grad_in, pg_->size(), copy_stream(stream_, device));
}

Tensor PooledEmbeddingsReduceScatter::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

// ---- PooledEmbeddingsAllGather ----

PooledEmbeddingsAllGather::PooledEmbeddingsAllGather(std::shared_ptr<comm::ProcessGroup> pg)
    : pg_(std::move(pg)) {
    SR_CHECK(pg_ != nullptr, "PooledEmbeddingsAllGather: null process group");
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
    works.push_back(pg_->all_gather_v(local_embs, out, scaled(batch_size_per_rank_, dim_)));
    return TensorAwaitable(std::move(works), [local_embs, out]() { return out; });
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
    return backward_awaitable(pg_->reduce_scatter_v(grad_output, scaled(batch_size_per_rank_, dim_),
                                                    grad_in, comm::ReduceOp::kSum),
                              grad_output, grad_in, pg_->size(), copy_stream(stream_, device));
}

Tensor PooledEmbeddingsAllGather::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

}  // namespace shardrec
