#include "test/reference/factorization_machine.h"

#include <cmath>

namespace shardrec::ref {

DenseValues factorization_machine_forward(const std::vector<double>& x, int64_t B, int64_t N) {
    DenseValues out(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
        double sum = 0, sum_abs = 0, sum_sq = 0;
        for (int64_t n = 0; n < N; ++n) {
            sum += x[b * N + n];
            sum_abs += std::fabs(x[b * N + n]);
            sum_sq += x[b * N + n] * x[b * N + n];
        }
        out.value[b] = 0.5 * (sum * sum - sum_sq);
        out.mag[b] = 0.5 * (sum_abs * sum_abs + sum_sq);
    }
    return out;
}

DenseValues factorization_machine_backward(const std::vector<double>& x,
                                           const std::vector<double>& grad_out,
                                           int64_t B,
                                           int64_t N) {
    DenseValues g(static_cast<size_t>(B * N));
    for (int64_t b = 0; b < B; ++b) {
        double sum = 0, sum_abs = 0;
        for (int64_t n = 0; n < N; ++n) {
            sum += x[b * N + n];
            sum_abs += std::fabs(x[b * N + n]);
        }
        for (int64_t n = 0; n < N; ++n) {
            g.value[b * N + n] = grad_out[b] * (sum - x[b * N + n]);
            g.mag[b * N + n] = std::fabs(grad_out[b]) * (sum_abs + std::fabs(x[b * N + n]));
        }
    }
    return g;
}

}  // namespace shardrec::ref
