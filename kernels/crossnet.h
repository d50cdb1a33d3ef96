// One DCN cross layer (TorchRec CrossNet, F1, and LowRankCrossNet, F2), one layer per call:
//   full rank:  x_{l+1} = x0 * (xl W^T + b) + xl              W [N, N]
//   low rank:   x_{l+1} = x0 * ((xl V^T) W^T + b) + xl        W [N, r], V [r, N]
// Rows are samples, so "W x_l" of the formulas is xl W^T here; * is elementwise. The CPU backend
// runs the products as sgemms and fuses bias, x0 scaling and the residual into one epilogue.
// Letters: B batch, N features, r low rank.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

//   x0   [B, N]  f32, the cross net input (may be the same tensor as xl, for layer 0)
//   xl   [B, N]  f32, this layer's input
//   w    [N, N]  f32 full rank, or [N, r] with v
//   v    [r, N]  f32 or nullptr (full rank); 1 <= r
//   bias [N]     f32
//   out  [B, N]  f32, written: x_{l+1}
//   u    [B, N]  f32, written: the saved gate W (V xl) + b that backward consumes
//   vx   [B, r]  f32, written when v is given (the saved xl V^T), else nullptr
// Outputs must not alias inputs. Deterministic for a fixed BLAS thread count.
void crossnet_forward(const Tensor& x0,
                      const Tensor& xl,
                      const Tensor& w,
                      const Tensor* v,
                      const Tensor& bias,
                      Tensor& out,
                      Tensor& u,
                      Tensor* vx,
                      Stream& stream);

// Backward of one layer, given the forward's inputs, its saved u (and vx), and grad_out [B, N].
// With gu = grad_out * x0:
//   grad_x0 += grad_out * u    [B, N]  ACCUMULATED: x0 feeds every layer, the caller zeroes it
//   grad_xl  = grad_out + gu W (full) or grad_out + (gu W) V (low rank)   [B, N] written
//   grad_w   = gu^T xl [N, N] (full) or gu^T vx [N, r]                         written
//   grad_v   = (gu W)^T xl [r, N], written; nullptr exactly when v is nullptr
//   grad_b   = sum over rows of gu [N], written, summed in row order
// grad_xl may be the same tensor as grad_x0 (layer 0, where xl is x0): it then ends holding
// grad_x0 + grad_out * u + grad_xl, the layer-0 input's whole gradient.
// The CPU backend keeps a thread-local scratch of B*(N + r) floats.
void crossnet_backward(const Tensor& x0,
                       const Tensor& xl,
                       const Tensor& w,
                       const Tensor* v,
                       const Tensor& u,
                       const Tensor* vx,
                       const Tensor& grad_out,
                       Tensor& grad_x0,
                       Tensor& grad_xl,
                       Tensor& grad_w,
                       Tensor* grad_v,
                       Tensor& grad_b,
                       Stream& stream);

namespace cpu {
void crossnet_forward(const Tensor& x0,
                      const Tensor& xl,
                      const Tensor& w,
                      const Tensor* v,
                      const Tensor& bias,
                      Tensor& out,
                      Tensor& u,
                      Tensor* vx);
void crossnet_backward(const Tensor& x0,
                       const Tensor& xl,
                       const Tensor& w,
                       const Tensor* v,
                       const Tensor& u,
                       const Tensor* vx,
                       const Tensor& grad_out,
                       Tensor& grad_x0,
                       Tensor& grad_xl,
                       Tensor& grad_w,
                       Tensor* grad_v,
                       Tensor& grad_b);
}  // namespace cpu

namespace cuda {
void crossnet_forward(const Tensor& x0,
                      const Tensor& xl,
                      const Tensor& w,
                      const Tensor* v,
                      const Tensor& bias,
                      Tensor& out,
                      Tensor& u,
                      Tensor* vx,
                      Stream& stream);
void crossnet_backward(const Tensor& x0,
                       const Tensor& xl,
                       const Tensor& w,
                       const Tensor* v,
                       const Tensor& u,
                       const Tensor* vx,
                       const Tensor& grad_out,
                       Tensor& grad_x0,
                       Tensor& grad_xl,
                       Tensor& grad_w,
                       Tensor* grad_v,
                       Tensor& grad_b,
                       Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
