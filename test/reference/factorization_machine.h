// Float64 reference of TorchRec's FactorizationMachine (the judge of
// kernels/factorization_machine.h): out_b = 0.5 ((sum_j x_bj)^2 - sum_j x_bj^2).
// Letters: B batch, N concatenated features.
#pragma once

#include <cstdint>
#include <vector>

#include "test/reference/linear.h"

namespace shardrec::ref {

DenseValues factorization_machine_forward(const std::vector<double>& x,
                                          int64_t B,
                                          int64_t N);  // [B, 1], chain N + 3

// grad_x [B, N] = grad_out_b (sum_j x_bj - x_bi), chain N + 2.
DenseValues factorization_machine_backward(const std::vector<double>& x,
                                           const std::vector<double>& grad_out,
                                           int64_t B,
                                           int64_t N);

}  // namespace shardrec::ref
