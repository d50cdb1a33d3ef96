// DLRM dot interaction (facebookresearch/dlrm interact_features, "dot", self_interaction=False):
// the dense vector and the F pooled embeddings form F+1 vectors T_0 = dense, T_k = emb_k; the
// output is the dense vector followed by every pairwise dot T_i . T_j with i > j, in row-major
// order of the strictly lower triangle: (1,0), (2,0), (2,1), (3,0), ... TorchRec's
// InteractionArch lists the same pairs as the upper triangle (i < j) in row-major order, which
// is a permutation of these columns. Letters: B batch, F embeddings, D their common dim,
// P = (F+1)F/2 pairs.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

// Column of pair (i, j), i > j, within the P interaction columns: i(i-1)/2 + j.
inline int64_t dot_interaction_pair_index(int64_t i, int64_t j) {
    return i * (i - 1) / 2 + j;
}

//   dense   [B, D]        f32
//   sparse  [B, F * D]    f32, row b = emb_1[b, :], ..., emb_F[b, :] (a KeyedTensor's values)
//   out     [B, D + P]    f32, written: out[b, :D] = dense[b, :], out[b, D + pair(i, j)] = T_i.T_j
// B, D >= 1 and F >= 0 (F = 0 copies dense). Each dot sums over D in index order.
void dot_interaction_forward(const Tensor& dense,
                             const Tensor& sparse,
                             Tensor& out,
                             Stream& stream);

// Backward: with g = grad_out[b, D + pair(i, j)],
//   grad_dense  [B, D]      = grad_out[:, :D] + sum over pairs touching T_0 of g * T_other
//   grad_sparse [B, F * D]  likewise for T_1..T_F; both written, not accumulated.
// dense and sparse are the forward inputs. Per row, contributions are summed in a fixed order.
void dot_interaction_backward(const Tensor& dense,
                              const Tensor& sparse,
                              const Tensor& grad_out,
                              Tensor& grad_dense,
                              Tensor& grad_sparse,
                              Stream& stream);

namespace cpu {
void dot_interaction_forward(const Tensor& dense, const Tensor& sparse, Tensor& out);
void dot_interaction_backward(const Tensor& dense,
                              const Tensor& sparse,
                              const Tensor& grad_out,
                              Tensor& grad_dense,
                              Tensor& grad_sparse);
}  // namespace cpu

namespace cuda {
void dot_interaction_forward(const Tensor& dense,
                             const Tensor& sparse,
                             Tensor& out,
                             Stream& stream);
void dot_interaction_backward(const Tensor& dense,
                              const Tensor& sparse,
                              const Tensor& grad_out,
                              Tensor& grad_dense,
                              Tensor& grad_sparse,
                              Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
