// Float64 reference of SwishLayerNorm (the judge of kernels/swish_layer_norm.h):
//   y = x * sigmoid(gamma * (x - mean) * rstd + beta), rstd = 1 / sqrt(var + eps) per row.
// Letters: R rows, N features.
#pragma once

#include <cstdint>
#include <vector>

#include "test/reference/linear.h"

namespace shardrec::ref {

struct SwishLayerNormForward {
    DenseValues y;     // [R, N], chain 2N + 10
    DenseValues mean;  // [R],    chain N + 1
    DenseValues rstd;  // [R],    chain 2N + 5
};

SwishLayerNormForward swish_layer_norm_forward(const std::vector<double>& x,
                                               const std::vector<double>& gamma,
                                               const std::vector<double>& beta,
                                               double eps,
                                               int64_t R,
                                               int64_t N);

struct SwishLayerNormGrads {
    DenseValues grad_x;      // [R, N], chain N + 12
    DenseValues grad_gamma;  // [N],    chain R + 8
    DenseValues grad_beta;   // [N],    chain R + 8
};

// mean and rstd are the saved forward statistics, taken as exact inputs.
SwishLayerNormGrads swish_layer_norm_backward(const std::vector<double>& x,
                                              const std::vector<double>& gamma,
                                              const std::vector<double>& beta,
                                              const std::vector<double>& mean,
                                              const std::vector<double>& rstd,
                                              const std::vector<double>& grad_y,
                                              int64_t R,
                                              int64_t N);

}  // namespace shardrec::ref
