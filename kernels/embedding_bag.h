// Pooled embedding lookup for one group of tables that share a dim (FBGEMM table-batched
// embedding, the kernel under TorchRec's EmbeddingBagCollection): forward, backward to a dense
// gradient, and backward with the optimizer fused in (only touched rows change).
//
// Letters: T tables, F features, B batch, D dim, N ids, E_t rows of table t, sum E rows in all.
// Layout shared by every entry here and by kernels/sequence_embedding.h:
//   weights            [sum E, D] f32 | f16 | bf16, row-major, contiguous; table t owns rows
//                      [table_offsets[t], table_offsets[t+1])
//   table_offsets      [T + 1]    i64, table_offsets[0] == 0, non-decreasing, last == sum E
//   feature_table      [F]        i32, the table of each feature, in [0, T); a table may serve
//                      several features (TorchRec shared table)
//   ids                [N]        i64, row ids local to the feature's table, in [0, E_t)
//   offsets            [F*B + 1]  i64, bag j = f*B + b (KJT key-major order) is
//                      ids[offsets[j] : offsets[j+1]]; offsets[0] == 0, non-decreasing, last == N
//   per_sample_weights [N]        f32 or nullptr (weighted / position-weighted features)
// Ids out of range are an Error naming feature, sample, id and range: checked before the CPU
// kernels run; on CUDA the ids stay on the device, the kernels skip a bad id (it adds nothing)
// and the next embedding entry on that device throws the Error.
// Accumulation is fp32 in id order (CPU: one bag per thread; CUDA: lanes split D, not ids):
// results are bitwise deterministic on a given backend. Every entry runs on `stream` (the CPU
// backend ignores it).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/core/pooling_mode.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "kernels/embedding_optimizer.h"

namespace shardrec::kernels {

// Scratch memory of the embedding backwards (sort keys, permutation, segment bounds, per-thread
// accumulators). Keep one per module and pass it to every step: buffers only grow, so a step of
// a shape already seen allocates nothing. Its contents are the backend's business.
class EmbeddingBackwardWorkspace {
public:
    // Buffer `slot` of at least `bytes` bytes on `device`, 64-byte aligned; contents undefined.
    void* buffer(size_t slot, int64_t bytes, Device device) {
        if (slot >= buffers_.size()) {
            buffers_.resize(slot + 1);
        }
        Tensor& b = buffers_[slot];
        if (!b.defined() || b.numel() < bytes || b.device() != device) {
            const int64_t grown = b.defined() ? std::max(bytes, b.numel() + b.numel() / 2) : bytes;
            b = Tensor::empty({std::max<int64_t>(grown, 64)}, DType::kU8, device);
        }
        return b.data_ptr();
    }

    // Whether buffer(slot, bytes, device) would return the buffer it holds (no reallocation). A
    // CUDA backward that must grow a buffer first waits for the kernels that may still use it.
    bool fits(size_t slot, int64_t bytes, Device device) const {
        return slot < buffers_.size() && buffers_[slot].defined() &&
               buffers_[slot].numel() >= bytes && buffers_[slot].device() == device;
    }

    int64_t bytes() const {
        int64_t total = 0;
        for (const Tensor& b : buffers_) {
            total += b.defined() ? b.numel() : 0;
        }
        return total;
    }

private:
    std::vector<Tensor> buffers_;
};

// Validates the layout above (shapes, dtypes, devices, offsets monotone, and on the CPU every id
// in range). Every dispatcher of this file and of sequence_embedding.h calls it once.
void check_embedding_lookup_args(const Tensor& weights,
                                 const Tensor& table_offsets,
                                 const Tensor& feature_table,
                                 const Tensor& ids,
                                 const Tensor& offsets,
                                 const Tensor* per_sample_weights);

// out [B, F*D] f32: out[b, f*D + d] = pool over bag f*B + b of w_i * weights[row(id_i), d], w_i = 1
// when per_sample_weights is null. SUM, or MEAN = SUM / L. Empty bags (L = 0) give zeros.
void embedding_bag_forward(const Tensor& weights,
                           const Tensor& table_offsets,
                           const Tensor& feature_table,
                           const Tensor& ids,
                           const Tensor& offsets,
                           const Tensor* per_sample_weights,
                           PoolingMode mode,
                           Tensor& out,
                           Stream& stream);

// Dense gradient. grad_out [B, F*D] f32 -> grad_weights [sum E, D] f32 (optional), fully
// overwritten: zero for untouched rows, else sum over the row's ids of
// s_i * grad_out[b, f*D : (f+1)*D] with s_i = w_i (/ L for MEAN), summed in id order.
// grad_per_sample_weights [N] f32 (optional): d loss / d w_i = dot(grad_out bag, row(id_i)) (/ L
// for MEAN), defined whether or not per_sample_weights is given; weights is read only for it.
// With grad_weights null this is the per-sample-weight gradient alone, which a fused-optimizer
// caller computes before embedding_bag_backward_fused changes the rows.
void embedding_bag_backward(const Tensor& grad_out,
                            const Tensor& weights,
                            const Tensor& table_offsets,
                            const Tensor& feature_table,
                            const Tensor& ids,
                            const Tensor& offsets,
                            const Tensor* per_sample_weights,
                            PoolingMode mode,
                            Tensor* grad_weights,
                            Tensor* grad_per_sample_weights,
                            EmbeddingBackwardWorkspace& workspace,
                            Stream& stream);

// Fused backward: the same per-row gradient as embedding_bag_backward, never materialised; each
// touched row of `weights` (in place) and of the optimizer state is updated once with the rule
// of `optim` (kernels/embedding_optimizer.h). State: state1/state2 as optim_num_states(type)
// needs, f32, [sum E, D] (Adagrad; Adam m and v) or [sum E] (row-wise Adagrad); pass nullptr for
// unused ones. f16/bf16 weights are upcast, updated in fp32 and rounded to nearest even.
void embedding_bag_backward_fused(const Tensor& grad_out,
                                  const Tensor& table_offsets,
                                  const Tensor& feature_table,
                                  const Tensor& ids,
                                  const Tensor& offsets,
                                  const Tensor* per_sample_weights,
                                  PoolingMode mode,
                                  const FusedOptimizerParams& optim,
                                  Tensor& weights,
                                  Tensor* state1,
                                  Tensor* state2,
                                  EmbeddingBackwardWorkspace& workspace,
                                  Stream& stream);

// How the CUDA backward sums a hot row's ids (more than 32 in a batch, as Zipf ids make them):
// kChunked (the default) in chunks of 256 ids, each summed by a block of its own, then the
// chunks' sums added in chunk order; kBlock, the earlier kernel, in one block per row, which
// serialises a row of many thousands of ids. Both are deterministic (fixed slices, no atomics)
// and differ in the last bits (the order of the partial sums). Process-wide; the CPU ignores it.
// runtime.hot_row_update sets it.
enum class HotRowUpdate { kChunked, kBlock };
const char* hot_row_update_name(HotRowUpdate mode);              // "chunked", "block"
HotRowUpdate hot_row_update_from_name(const std::string& name);  // throws on anything else
void set_hot_row_update(HotRowUpdate mode);
HotRowUpdate hot_row_update();

// Checks the optimizer state tensors against optim.type and weights [sum E, D] (shared with
// sequence_embedding_backward_fused).
void check_fused_optimizer_args(const FusedOptimizerParams& optim,
                                const Tensor& weights,
                                const Tensor* state1,
                                const Tensor* state2);

namespace cpu {

void embedding_bag_forward(const Tensor& weights,
                           const Tensor& table_offsets,
                           const Tensor& feature_table,
                           const Tensor& ids,
                           const Tensor& offsets,
                           const Tensor* per_sample_weights,
                           PoolingMode mode,
                           Tensor& out);
void embedding_bag_backward(const Tensor& grad_out,
                            const Tensor& weights,
                            const Tensor& table_offsets,
                            const Tensor& feature_table,
                            const Tensor& ids,
                            const Tensor& offsets,
                            const Tensor* per_sample_weights,
                            PoolingMode mode,
                            Tensor* grad_weights,
                            Tensor* grad_per_sample_weights,
                            EmbeddingBackwardWorkspace& workspace);
void embedding_bag_backward_fused(const Tensor& grad_out,
                                  const Tensor& table_offsets,
                                  const Tensor& feature_table,
                                  const Tensor& ids,
                                  const Tensor& offsets,
                                  const Tensor* per_sample_weights,
                                  PoolingMode mode,
                                  const FusedOptimizerParams& optim,
                                  Tensor& weights,
                                  Tensor* state1,
                                  Tensor* state2,
                                  EmbeddingBackwardWorkspace& workspace);

}  // namespace cpu

namespace cuda {

void embedding_bag_forward(const Tensor& weights,
                           const Tensor& table_offsets,
                           const Tensor& feature_table,
                           const Tensor& ids,
                           const Tensor& offsets,
                           const Tensor* per_sample_weights,
                           PoolingMode mode,
                           Tensor& out,
                           Stream& stream);
void embedding_bag_backward(const Tensor& grad_out,
                            const Tensor& weights,
                            const Tensor& table_offsets,
                            const Tensor& feature_table,
                            const Tensor& ids,
                            const Tensor& offsets,
                            const Tensor* per_sample_weights,
                            PoolingMode mode,
                            Tensor* grad_weights,
                            Tensor* grad_per_sample_weights,
                            EmbeddingBackwardWorkspace& workspace,
                            Stream& stream);
void embedding_bag_backward_fused(const Tensor& grad_out,
                                  const Tensor& table_offsets,
                                  const Tensor& feature_table,
                                  const Tensor& ids,
                                  const Tensor& offsets,
                                  const Tensor* per_sample_weights,
                                  PoolingMode mode,
                                  const FusedOptimizerParams& optim,
                                  Tensor& weights,
                                  Tensor* state1,
                                  Tensor* state2,
                                  EmbeddingBackwardWorkspace& workspace,
                                  Stream& stream);

}  // namespace cuda

}  // namespace shardrec::kernels
