// TorchRec SwishLayerNorm: Y = X * sigmoid(LayerNorm(X)), the layer norm over the last dim with
// learnable gamma and beta (torch.nn.LayerNorm, biased variance, eps inside the sqrt).
// Normalising over several trailing dims is the same op on the [R, N] view with N their product.
// Letters: R rows, N normalised features.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

constexpr float kLayerNormEps = 1e-5f;  // torch.nn.LayerNorm default

//   x      [R, N]  f32
//   gamma  [N], beta [N]  f32
//   y      [R, N]  written: x * sigmoid(gamma * (x - mean) * rstd + beta)
//   mean   [R]     written (saved for backward)
//   rstd   [R]     written: 1 / sqrt(var + eps), var = mean((x - mean)^2)
// R, N >= 1; row statistics are summed over N in index order.
void swish_layer_norm_forward(const Tensor& x,
                              const Tensor& gamma,
                              const Tensor& beta,
                              float eps,
                              Tensor& y,
                              Tensor& mean,
                              Tensor& rstd,
                              Stream& stream);

// Backward from grad_y [R, N] given the forward's x, gamma, beta, mean and rstd:
//   grad_x [R, N] written; grad_gamma [N] and grad_beta [N] written (summed over rows in order).
void swish_layer_norm_backward(const Tensor& x,
                               const Tensor& gamma,
                               const Tensor& beta,
                               const Tensor& mean,
                               const Tensor& rstd,
                               const Tensor& grad_y,
                               Tensor& grad_x,
                               Tensor& grad_gamma,
                               Tensor& grad_beta,
                               Stream& stream);

namespace cpu {
void swish_layer_norm_forward(const Tensor& x,
                              const Tensor& gamma,
                              const Tensor& beta,
                              float eps,
                              Tensor& y,
                              Tensor& mean,
                              Tensor& rstd);
void swish_layer_norm_backward(const Tensor& x,
                               const Tensor& gamma,
                               const Tensor& beta,
                               const Tensor& mean,
                               const Tensor& rstd,
                               const Tensor& grad_y,
                               Tensor& grad_x,
                               Tensor& grad_gamma,
                               Tensor& grad_beta);
}  // namespace cpu

namespace cuda {
void swish_layer_norm_forward(const Tensor& x,
                              const Tensor& gamma,
                              const Tensor& beta,
                              float eps,
                              Tensor& y,
                              Tensor& mean,
                              Tensor& rstd,
                              Stream& stream);
void swish_layer_norm_backward(const Tensor& x,
                               const Tensor& gamma,
                               const Tensor& beta,
                               const Tensor& mean,
                               const Tensor& rstd,
                               const Tensor& grad_y,
                               Tensor& grad_x,
                               Tensor& grad_gamma,
                               Tensor& grad_beta,
                               Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
