// Sequence (non-pooled) embedding lookup for one group of tables sharing a dim, the kernel under
// TorchRec's EmbeddingCollection: every id gets its own output row. The table layout (weights,
// table_offsets, feature_table, ids, offsets) is the one documented in kernels/embedding_bag.h;
// offsets [F*B + 1] only tells which feature (hence table) each id belongs to.
// Deterministic whatever the thread count. Every entry runs on `stream` (CPU ignores it).
#pragma once

#include "kernels/embedding_bag.h"

namespace shardrec::kernels {

// out [N, D] f32: out[n, :] = weights[table_offsets[t(n)] + ids[n], :], upcast to f32, where
// t(n) is the table of the feature whose bags hold id n.
void sequence_embedding_forward(const Tensor& weights,
                                const Tensor& table_offsets,
                                const Tensor& feature_table,
                                const Tensor& ids,
                                const Tensor& offsets,
                                Tensor& out,
                                Stream& stream);

// grad_out [N, D] f32 (one gradient row per id). Duplicate ids are summed in id order and each
// touched row of `weights` and of the optimizer state is updated once, exactly as
// embedding_bag_backward_fused does (same state shapes and rules, same implementation).
void sequence_embedding_backward_fused(const Tensor& grad_out,
                                       const Tensor& table_offsets,
                                       const Tensor& feature_table,
                                       const Tensor& ids,
                                       const Tensor& offsets,
                                       const FusedOptimizerParams& optim,
                                       Tensor& weights,
                                       Tensor* state1,
                                       Tensor* state2,
                                       EmbeddingBackwardWorkspace& workspace,
                                       Stream& stream);

namespace cpu {

void sequence_embedding_forward(const Tensor& weights,
                                const Tensor& table_offsets,
                                const Tensor& feature_table,
                                const Tensor& ids,
                                const Tensor& offsets,
                                Tensor& out);
void sequence_embedding_backward_fused(const Tensor& grad_out,
                                       const Tensor& table_offsets,
                                       const Tensor& feature_table,
                                       const Tensor& ids,
                                       const Tensor& offsets,
                                       const FusedOptimizerParams& optim,
                                       Tensor& weights,
                                       Tensor* state1,
                                       Tensor* state2,
                                       EmbeddingBackwardWorkspace& workspace);

}  // namespace cpu

namespace cuda {

void sequence_embedding_forward(const Tensor& weights,
                                const Tensor& table_offsets,
                                const Tensor& feature_table,
                                const Tensor& ids,
                                const Tensor& offsets,
                                Tensor& out,
                                Stream& stream);
void sequence_embedding_backward_fused(const Tensor& grad_out,
                                       const Tensor& table_offsets,
                                       const Tensor& feature_table,
                                       const Tensor& ids,
                                       const Tensor& offsets,
                                       const FusedOptimizerParams& optim,
                                       Tensor& weights,
                                       Tensor* state1,
                                       Tensor* state2,
                                       EmbeddingBackwardWorkspace& workspace,
                                       Stream& stream);

}  // namespace cuda

}  // namespace shardrec::kernels
