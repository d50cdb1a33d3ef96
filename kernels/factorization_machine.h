// TorchRec FactorizationMachine (the FM part of DeepFM, F5): every scalar of the concatenated,
// flattened embeddings is its own field, so out = 0.5 * ((sum_j x_j)^2 - sum_j x_j^2) per row
// (unlike classic FM, which sums per latent dim). Letters: B batch, N = sum of n_i * d_i.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

//   x    [B, N]  f32, concat(flatten(emb_i)) per row
//   out  [B, 1]  f32, written; sums over N in index order
void factorization_machine_forward(const Tensor& x, Tensor& out, Stream& stream);

// grad_x [B, N] = grad_out[b] * (sum_j x_bj - x_bi), written. grad_out is [B, 1].
void factorization_machine_backward(const Tensor& x,
                                    const Tensor& grad_out,
                                    Tensor& grad_x,
                                    Stream& stream);

namespace cpu {
void factorization_machine_forward(const Tensor& x, Tensor& out);
void factorization_machine_backward(const Tensor& x, const Tensor& grad_out, Tensor& grad_x);
}  // namespace cpu

namespace cuda {
void factorization_machine_forward(const Tensor& x, Tensor& out, Stream& stream);
void factorization_machine_backward(const Tensor& x,
                                    const Tensor& grad_out,
                                    Tensor& grad_x,
                                    Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
