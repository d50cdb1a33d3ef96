#include "test/reference/dot_interaction.h"

#include <cmath>

namespace shardrec::ref {
namespace {

double t_at(const std::vector<double>& dense,
            const std::vector<double>& sparse,
            int64_t b,
            int64_t k,
            int64_t d,
            int64_t F,
            int64_t D) {
    return k == 0 ? dense[b * D + d] : sparse[b * F * D + (k - 1) * D + d];
}

}  // namespace

DenseValues dot_interaction_forward(const std::vector<double>& dense,
                                    const std::vector<double>& sparse,
                                    int64_t B,
                                    int64_t F,
                                    int64_t D) {
    const int64_t W = D + (F + 1) * F / 2;
    DenseValues out(static_cast<size_t>(B * W));
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t d = 0; d < D; ++d) {
            out.value[b * W + d] = dense[b * D + d];
            out.mag[b * W + d] = std::fabs(dense[b * D + d]);
        }
        int64_t col = D;
        for (int64_t i = 1; i <= F; ++i) {
            for (int64_t j = 0; j < i; ++j, ++col) {
                for (int64_t d = 0; d < D; ++d) {
                    const double p =
                        t_at(dense, sparse, b, i, d, F, D) * t_at(dense, sparse, b, j, d, F, D);
                    out.value[b * W + col] += p;
                    out.mag[b * W + col] += std::fabs(p);
                }
            }
        }
    }
    return out;
}

DotInteractionGrads dot_interaction_backward(const std::vector<double>& dense,
                                             const std::vector<double>& sparse,
                                             const std::vector<double>& grad_out,
                                             int64_t B,
                                             int64_t F,
                                             int64_t D) {
    const int64_t W = D + (F + 1) * F / 2;
    DotInteractionGrads r{DenseValues(static_cast<size_t>(B * D)),
                          DenseValues(static_cast<size_t>(B * F * D))};
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t d = 0; d < D; ++d) {
            r.grad_dense.value[b * D + d] = grad_out[b * W + d];
            r.grad_dense.mag[b * D + d] = std::fabs(grad_out[b * W + d]);
        }
        int64_t col = D;
        for (int64_t i = 1; i <= F; ++i) {
            for (int64_t j = 0; j < i; ++j, ++col) {
                const double g = grad_out[b * W + col];
                for (int64_t d = 0; d < D; ++d) {
                    // d(T_i . T_j)/dT_i = T_j and vice versa.
                    const double ti = t_at(dense, sparse, b, i, d, F, D);
                    const double tj = t_at(dense, sparse, b, j, d, F, D);
                    DenseValues& gi = r.grad_sparse;
                    const int64_t ii = b * F * D + (i - 1) * D + d;
                    gi.value[ii] += g * tj;
                    gi.mag[ii] += std::fabs(g * tj);
                    DenseValues& gj = j == 0 ? r.grad_dense : r.grad_sparse;
                    const int64_t jj = j == 0 ? b * D + d : b * F * D + (j - 1) * D + d;
                    gj.value[jj] += g * ti;
                    gj.mag[jj] += std::fabs(g * ti);
                }
            }
        }
    }
    return r;
}

}  // namespace shardrec::ref
