// FactorizationMachine on the CPU: one pass per row for sum and sum of squares, in index order.
#include "kernels/factorization_machine.h"

namespace shardrec::kernels::cpu {
namespace {

// Rows below which a call stays on the calling thread (rows are independent).
constexpr int64_t kMinRowsForThreads = 64;

}  // namespace

void factorization_machine_forward(const Tensor& x, Tensor& out) {
    const int64_t B = x.size(0), N = x.size(1);
    const float* xp = x.data<float>();
    float* op = out.data<float>();
#pragma omp parallel for schedule(static) if (B >= kMinRowsForThreads)
    for (int64_t b = 0; b < B; ++b) {
        const float* xb = xp + b * N;  // x[b, :], N floats
        float sum = 0.0f, sum_sq = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
            sum += xb[n];
            sum_sq += xb[n] * xb[n];
        }
        op[b] = 0.5f * (sum * sum - sum_sq);
    }
}

void factorization_machine_backward(const Tensor& x, const Tensor& grad_out, Tensor& grad_x) {
    const int64_t B = x.size(0), N = x.size(1);
    const float* xp = x.data<float>();
    const float* gp = grad_out.data<float>();
    float* gxp = grad_x.data<float>();
#pragma omp parallel for schedule(static) if (B >= kMinRowsForThreads)
    for (int64_t b = 0; b < B; ++b) {
        const float* xb = xp + b * N;
        float sum = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
            sum += xb[n];
        }
        for (int64_t n = 0; n < N; ++n) {
            gxp[b * N + n] = gp[b] * (sum - xb[n]);
        }
    }
}

}  // namespace shardrec::kernels::cpu
