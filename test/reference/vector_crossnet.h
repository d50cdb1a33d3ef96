// Float64 reference of one VectorCrossNet layer in TorchRec's convention, bias outside the
// product (the judge of kernels/vector_crossnet.h): s = xl . w, out = x0 * s + b + xl.
// Letters: B batch, N features.
#pragma once

#include <cstdint>
#include <vector>

#include "test/reference/linear.h"

namespace shardrec::ref {

struct VectorCrossNetForward {
    DenseValues out;  // [B, N], chain N + 3
    DenseValues s;    // [B],    chain N
};

VectorCrossNetForward vector_crossnet_forward(const std::vector<double>& x0,
                                              const std::vector<double>& xl,
                                              const std::vector<double>& w,
                                              const std::vector<double>& bias,
                                              int64_t B,
                                              int64_t N);

struct VectorCrossNetGrads {
    DenseValues grad_x0;  // [B, N] = grad_x0_init + grad_out * s
    DenseValues grad_xl;  // [B, N], chain N + 2
    DenseValues grad_w;   // [N],    chain N + B + 1
    DenseValues grad_b;   // [N],    chain B
};

VectorCrossNetGrads vector_crossnet_backward(const std::vector<double>& x0,
                                             const std::vector<double>& xl,
                                             const std::vector<double>& w,
                                             const std::vector<double>& s,
                                             const std::vector<double>& grad_out,
                                             const std::vector<double>& grad_x0_init,
                                             int64_t B,
                                             int64_t N);

}  // namespace shardrec::ref
