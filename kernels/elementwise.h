// Element-wise tensor arithmetic the models need between their modules (torch's in-place add_):
// DeepFM sums the gradients that reach one input through two branches.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

//   a   any shape, f32, updated in place: a += b
//   b   the same numel, f32, on a's device (it may not alias a)
void add_(Tensor& a, const Tensor& b, Stream& stream);

namespace cpu {
void add_(Tensor& a, const Tensor& b);
}  // namespace cpu

namespace cuda {
void add_(Tensor& a, const Tensor& b, Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
