#include "test/reference/vector_crossnet.h"

#include <cmath>

namespace shardrec::ref {

VectorCrossNetForward vector_crossnet_forward(const std::vector<double>& x0,
                                              const std::vector<double>& xl,
                                              const std::vector<double>& w,
                                              const std::vector<double>& bias,
                                              int64_t B,
                                              int64_t N) {
    const DenseValues X0 = exact(x0), XL = exact(xl), Bias = exact(bias);
    VectorCrossNetForward f;
    f.s = matmul(XL, false, exact(w), false, B, 1, N);  // [B, 1]
    f.out = DenseValues(static_cast<size_t>(B * N));
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t n = 0; n < N; ++n) {
            const int64_t i = b * N + n;
            f.out.value[i] = X0.value[i] * f.s.value[b] + Bias.value[n] + XL.value[i];
            f.out.mag[i] = X0.mag[i] * f.s.mag[b] + Bias.mag[n] + XL.mag[i];
        }
    }
    return f;
}

VectorCrossNetGrads vector_crossnet_backward(const std::vector<double>& x0,
                                             const std::vector<double>& xl,
                                             const std::vector<double>& w,
                                             const std::vector<double>& s,
                                             const std::vector<double>& grad_out,
                                             const std::vector<double>& grad_x0_init,
                                             int64_t B,
                                             int64_t N) {
    const DenseValues GO = exact(grad_out), XL = exact(xl), W = exact(w), S = exact(s);
    const DenseValues X0 = exact(x0);
    VectorCrossNetGrads g;
    DenseValues gsv(static_cast<size_t>(B));  // gs_b = grad_out_b . x0_b
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t n = 0; n < N; ++n) {
            gsv.value[b] += GO.value[b * N + n] * X0.value[b * N + n];
            gsv.mag[b] += GO.mag[b * N + n] * X0.mag[b * N + n];
        }
    }
    g.grad_x0 = DenseValues(static_cast<size_t>(B * N));
    g.grad_xl = DenseValues(static_cast<size_t>(B * N));
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t n = 0; n < N; ++n) {
            const int64_t i = b * N + n;
            g.grad_x0.value[i] = grad_x0_init[i] + GO.value[i] * S.value[b];
            g.grad_x0.mag[i] = std::fabs(grad_x0_init[i]) + GO.mag[i] * S.mag[b];
            g.grad_xl.value[i] = GO.value[i] + gsv.value[b] * W.value[n];
            g.grad_xl.mag[i] = GO.mag[i] + gsv.mag[b] * W.mag[n];
        }
    }
    g.grad_w = matmul(gsv, true, XL, false, 1, N, B);  // [1, N] = gs^T xl
    g.grad_b = sum_rows(GO, B, N);
    return g;
}

}  // namespace shardrec::ref
