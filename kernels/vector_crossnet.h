// One DCN-v1 cross layer (TorchRec VectorCrossNet, F3) with TorchRec's implementation convention,
// the bias OUTSIDE the product (the paper and TorchRec's docstring put it inside):
//   x_{l+1} = x0 * (xl . w) + b + xl        (xl . w is one scalar per row)
// One layer per call. Letters: B batch, N features.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

//   x0   [B, N]  f32 (may be the same tensor as xl, for layer 0)
//   xl   [B, N]  f32
//   w    [N]     f32 (TorchRec's kernel [N, 1])
//   bias [N]     f32
//   out  [B, N]  f32, written
//   s    [B]     f32, written: the saved dots xl . w (summed over N in index order)
void vector_crossnet_forward(const Tensor& x0,
                             const Tensor& xl,
                             const Tensor& w,
                             const Tensor& bias,
                             Tensor& out,
                             Tensor& s,
                             Stream& stream);

// Backward of one layer, with gs_b = grad_out_b . x0_b:
//   grad_x0 += grad_out * s        [B, N]  ACCUMULATED (x0 feeds every layer)
//   grad_xl  = grad_out + gs w     [B, N]  written
//   grad_w   = sum_b gs_b xl_b     [N]     written, rows in order
//   grad_b   = sum_b grad_out_b    [N]     written, rows in order
// grad_xl may be the same tensor as grad_x0 (layer 0, where xl is x0): it then ends holding
// grad_x0 + grad_out * s + grad_xl.
void vector_crossnet_backward(const Tensor& x0,
                              const Tensor& xl,
                              const Tensor& w,
                              const Tensor& s,
                              const Tensor& grad_out,
                              Tensor& grad_x0,
                              Tensor& grad_xl,
                              Tensor& grad_w,
                              Tensor& grad_b,
                              Stream& stream);

namespace cpu {
void vector_crossnet_forward(const Tensor& x0,
                             const Tensor& xl,
                             const Tensor& w,
                             const Tensor& bias,
                             Tensor& out,
                             Tensor& s);
void vector_crossnet_backward(const Tensor& x0,
                              const Tensor& xl,
                              const Tensor& w,
                              const Tensor& s,
                              const Tensor& grad_out,
                              Tensor& grad_x0,
                              Tensor& grad_xl,
                              Tensor& grad_w,
                              Tensor& grad_b);
}  // namespace cpu

namespace cuda {
void vector_crossnet_forward(const Tensor& x0,
                             const Tensor& xl,
                             const Tensor& w,
                             const Tensor& bias,
                             Tensor& out,
                             Tensor& s,
                             Stream& stream);
void vector_crossnet_backward(const Tensor& x0,
                              const Tensor& xl,
                              const Tensor& w,
                              const Tensor& s,
                              const Tensor& grad_out,
                              Tensor& grad_x0,
                              Tensor& grad_xl,
                              Tensor& grad_w,
                              Tensor& grad_b,
                              Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
