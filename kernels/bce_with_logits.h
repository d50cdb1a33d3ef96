// Binary cross-entropy on logits, mean over the batch (torch BCEWithLogitsLoss, reduction=mean),
// with the gradient wrt the logits in the same pass. Numerically stable form per element:
//   loss_b = max(x, 0) - x * y + log1p(exp(-|x|)),   grad_b = (sigmoid(x) - y) / B
// Letters: B batch.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

//   logits       [B] or [B, 1]  f32
//   labels       same numel     f32, in [0, 1] (soft labels allowed)
//   loss         [1]            f32, written: mean over B (summed in row order, in double on CPU)
//   grad_logits  shape of logits, f32, written (already divided by B)
// B >= 1. Large |x| neither overflows nor loses the loss: exp only ever sees -|x|.
void bce_with_logits(
    const Tensor& logits, const Tensor& labels, Tensor& loss, Tensor& grad_logits, Stream& stream);

namespace cpu {
void bce_with_logits(const Tensor& logits, const Tensor& labels, Tensor& loss, Tensor& grad_logits);
}  // namespace cpu

namespace cuda {
void bce_with_logits(
    const Tensor& logits, const Tensor& labels, Tensor& loss, Tensor& grad_logits, Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
