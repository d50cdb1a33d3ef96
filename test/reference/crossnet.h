// Float64 reference of one cross layer, full and low rank (the judge of kernels/crossnet.h):
//   u = xl W^T + b  (or (xl V^T) W^T + b),   out = x0 * u + xl.
// Letters: B batch, N features, r low rank (v empty means full rank).
#pragma once

#include <cstdint>
#include <vector>

#include "test/reference/linear.h"

namespace shardrec::ref {

struct CrossNetForward {
    DenseValues out;  // [B, N], chain N + r + 3
    DenseValues u;    // [B, N]
    DenseValues vx;   // [B, r], empty for full rank
};

CrossNetForward crossnet_forward(const std::vector<double>& x0,
                                 const std::vector<double>& xl,
                                 const std::vector<double>& w,
                                 const std::vector<double>& v,
                                 const std::vector<double>& bias,
                                 int64_t B,
                                 int64_t N,
                                 int64_t r);

struct CrossNetGrads {
    DenseValues grad_x0;  // [B, N] = grad_x0_init + grad_out * u
    DenseValues grad_xl;  // [B, N], chain N + r + 3
    DenseValues grad_w;   // [N, N] or [N, r], chain B + 2
    DenseValues grad_v;   // [r, N], chain B + N + 2; empty for full rank
    DenseValues grad_b;   // [N], chain B + 1
};

// u and vx are the saved forward values (inputs here, exact).
CrossNetGrads crossnet_backward(const std::vector<double>& x0,
                                const std::vector<double>& xl,
                                const std::vector<double>& w,
                                const std::vector<double>& v,
                                const std::vector<double>& u,
                                const std::vector<double>& vx,
                                const std::vector<double>& grad_out,
                                const std::vector<double>& grad_x0_init,
                                int64_t B,
                                int64_t N,
                                int64_t r);

}  // namespace shardrec::ref
