// Float64 reference of the pooled embedding lookup (see the header). Plain loops in the order of
// the definitions; speed does not matter here, readability does.
#include "test/reference/embedding_bag.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace shardrec::ref {
namespace {

using kernels::OptimType;

size_t at(int64_t i) {
    return static_cast<size_t>(i);
}

// s_i of id n in bag j: w_n (1 when unweighted), divided by L for MEAN.
double scale_of(const EmbeddingLookup& a, int64_t n, int64_t j, PoolingMode mode) {
    const double w = a.per_sample_weights.empty() ? 1.0 : a.per_sample_weights[at(n)];
    const auto length = static_cast<double>(a.offsets[at(j + 1)] - a.offsets[at(j)]);
    return mode == PoolingMode::kMean ? w / length : w;
}

}  // namespace

int64_t EmbeddingLookup::batch() const {
    return (static_cast<int64_t>(offsets.size()) - 1) / num_features();
}

Values embedding_bag_forward(const EmbeddingLookup& a,
                             const std::vector<double>& weights,
                             PoolingMode mode) {
    const int64_t F = a.num_features(), B = a.batch(), D = a.dim;
    Values out{std::vector<double>(at(B * F * D), 0.0), std::vector<double>(at(B * F * D), 0.0)};
    for (int64_t f = 0; f < F; ++f) {
        for (int64_t b = 0; b < B; ++b) {
            const int64_t j = f * B + b;
            for (int64_t n = a.offsets[at(j)]; n < a.offsets[at(j + 1)]; ++n) {
                const double s = scale_of(a, n, j, mode);
                const int64_t row = a.row_of(n, f);
                for (int64_t d = 0; d < D; ++d) {
                    const double term = s * weights[at(row * D + d)];
                    out.value[at(b * F * D + f * D + d)] += term;
                    out.mag[at(b * F * D + f * D + d)] += std::fabs(term);
                }
            }
        }
    }
    return out;
}

RowGradients embedding_bag_row_gradients(const EmbeddingLookup& a,
                                         const std::vector<double>& grad_out,
                                         PoolingMode mode) {
    const int64_t F = a.num_features(), B = a.batch(), D = a.dim;
    std::map<int64_t, std::vector<double>> grad, mag;  // row -> [D]
    std::map<int64_t, int64_t> count;
    for (int64_t f = 0; f < F; ++f) {
        for (int64_t b = 0; b < B; ++b) {
            const int64_t j = f * B + b;
            for (int64_t n = a.offsets[at(j)]; n < a.offsets[at(j + 1)]; ++n) {
                const int64_t row = a.row_of(n, f);
                const double s = scale_of(a, n, j, mode);
                auto& g = grad[row];
                auto& m = mag[row];
                g.resize(at(D), 0.0);
                m.resize(at(D), 0.0);
                ++count[row];
                for (int64_t d = 0; d < D; ++d) {
                    const double term = s * grad_out[at(b * F * D + f * D + d)];
                    g[at(d)] += term;
                    m[at(d)] += std::fabs(term);
                }
            }
        }
    }
    RowGradients r;
    for (const auto& [row, g] : grad) {
        r.rows.push_back(row);
        r.grad.insert(r.grad.end(), g.begin(), g.end());
        r.mag.insert(r.mag.end(), mag[row].begin(), mag[row].end());
        r.max_count = std::max(r.max_count, count[row]);
    }
    return r;
}

Values embedding_bag_backward(const EmbeddingLookup& a,
                              const std::vector<double>& grad_out,
                              PoolingMode mode) {
    const int64_t D = a.dim;
    const RowGradients r = embedding_bag_row_gradients(a, grad_out, mode);
    Values out{std::vector<double>(at(a.num_rows() * D), 0.0),
               std::vector<double>(at(a.num_rows() * D), 0.0)};
    for (size_t u = 0; u < r.rows.size(); ++u) {
        for (int64_t d = 0; d < D; ++d) {
            out.value[at(r.rows[u] * D + d)] = r.grad[u * at(D) + at(d)];
            out.mag[at(r.rows[u] * D + d)] = r.mag[u * at(D) + at(d)];
        }
    }
    return out;
}

Values embedding_bag_backward_per_sample_weights(const EmbeddingLookup& a,
                                                 const std::vector<double>& weights,
                                                 const std::vector<double>& grad_out,
                                                 PoolingMode mode) {
    const int64_t F = a.num_features(), B = a.batch(), D = a.dim;
    Values out{std::vector<double>(a.ids.size(), 0.0), std::vector<double>(a.ids.size(), 0.0)};
    for (int64_t f = 0; f < F; ++f) {
        for (int64_t b = 0; b < B; ++b) {
            const int64_t j = f * B + b;
            const auto length = static_cast<double>(a.offsets[at(j + 1)] - a.offsets[at(j)]);
            const double div = mode == PoolingMode::kMean ? length : 1.0;
            for (int64_t n = a.offsets[at(j)]; n < a.offsets[at(j + 1)]; ++n) {
                const int64_t row = a.row_of(n, f);
                for (int64_t d = 0; d < D; ++d) {
                    const double term =
                        grad_out[at(b * F * D + f * D + d)] * weights[at(row * D + d)] / div;
                    out.value[at(n)] += term;
                    out.mag[at(n)] += std::fabs(term);
                }
            }
        }
    }
    return out;
}

// ---- fused optimizer ----
//
// Error model for the mags. The kernel's aggregated gradient g (and its weight-decay term) has an
// fp32 error of at most K u gm, with gm the mag of g. Each output's mag is the sum of |terms|
// through which that error and the update's own roundings reach it:
//   SGD:      w' = w - lr g                     mag |w| + lr gm
//   Adagrad:  G' = G + g^2                      mag G + g^2 + 2|g| gm
//   row-wise: G' = G + mean_d g_d^2             mag G + mean_d (g_d^2 + 2|g_d| gm_d)
//             w' = w - lr g / (sqrt(G') + eps)  mag |w| + lr (gm + |g| magG / (2 G')) /
//             (sqrt(G')+eps) (a relative error r of G' moves sqrt(G') by r/2: the second term)
//   Adam:     m' = b1 m + (1-b1) g              mag b1 |m| + (1-b1) gm
//             v' = b2 v + (1-b2) g^2            mag b2 v + (1-b2) (g^2 + 2|g| gm)
//             w' = w - lr mh / (sqrt(vh) + eps) mag |w| + lr (magm/c1 + |mh| magv / (2 v')) /
//                                                   (sqrt(vh) + eps), mh = m'/c1, vh = v'/c2
// The caller's tolerance counts K plus the update's roundings (and D for the row-wise mean).

namespace {

struct RowUpdate {
    double* w;
    double* w_mag;
    double* s1;
    double* s1_mag;
    double* s2;
    double* s2_mag;
};

void update_row(const kernels::FusedOptimizerParams& o,
                int64_t D,
                const double* g_in,
                const double* gm_in,
                const RowUpdate& r) {
    const double lr = o.learning_rate, eps = o.eps, wd = o.weight_decay;
    std::vector<double> g(at(D)), gm(at(D));
    for (int64_t d = 0; d < D; ++d) {
        g[at(d)] = g_in[d] + wd * r.w[d];  // L2 weight decay
        gm[at(d)] = gm_in[d] + std::fabs(wd * r.w[d]);
    }
    if (o.type == OptimType::kExactRowWiseAdagrad) {
        double sq = 0, sq_mag = 0;
        for (int64_t d = 0; d < D; ++d) {
            sq += g[at(d)] * g[at(d)];
            sq_mag += g[at(d)] * g[at(d)] + 2 * std::fabs(g[at(d)]) * gm[at(d)];
        }
        r.s1[0] += sq / static_cast<double>(D);
        r.s1_mag[0] = r.s1[0] + sq_mag / static_cast<double>(D) - sq / static_cast<double>(D);
        const double denom = std::sqrt(r.s1[0]) + eps;
        const double rel = r.s1[0] > 0 ? r.s1_mag[0] / (2 * r.s1[0]) : 0.0;
        for (int64_t d = 0; d < D; ++d) {
            r.w_mag[d] = std::fabs(r.w[d]) + lr * (gm[at(d)] + std::fabs(g[at(d)]) * rel) / denom;
            r.w[d] -= lr * g[at(d)] / denom;
        }
        return;
    }
    const double c1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(o.step));
    const double c2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(o.step));
    const double b1 = o.beta1, b2 = o.beta2;
    for (int64_t d = 0; d < D; ++d) {
        const double gd = g[at(d)], gmd = gm[at(d)], w = r.w[d];
        if (o.type == OptimType::kSgd) {
            r.w[d] = w - lr * gd;
            r.w_mag[d] = std::fabs(w) + lr * gmd;
        } else if (o.type == OptimType::kExactAdagrad) {
            const double G = r.s1[d] + gd * gd;
            r.s1_mag[d] = r.s1[d] + gd * gd + 2 * std::fabs(gd) * gmd;
            r.s1[d] = G;
            const double denom = std::sqrt(G) + eps;
            const double rel = G > 0 ? r.s1_mag[d] / (2 * G) : 0.0;
            r.w[d] = w - lr * gd / denom;
            r.w_mag[d] = std::fabs(w) + lr * (gmd + std::fabs(gd) * rel) / denom;
        } else {
            const double m = b1 * r.s1[d] + (1 - b1) * gd;
            const double v = b2 * r.s2[d] + (1 - b2) * gd * gd;
            r.s1_mag[d] = b1 * std::fabs(r.s1[d]) + (1 - b1) * gmd;
            r.s2_mag[d] = b2 * r.s2[d] + (1 - b2) * (gd * gd + 2 * std::fabs(gd) * gmd);
            r.s1[d] = m;
            r.s2[d] = v;
            const double mh = m / c1, vh = v / c2;
            const double denom = std::sqrt(vh) + eps;
            const double rel = v > 0 ? r.s2_mag[d] / (2 * v) : 0.0;
            r.w[d] = w - lr * mh / denom;
            r.w_mag[d] = std::fabs(w) + lr * (r.s1_mag[d] / c1 + std::fabs(mh) * rel) / denom;
        }
    }
}

Values with_abs_mag(const std::vector<double>& v) {
    Values out{v, v};
    for (double& x : out.mag) {
        x = std::fabs(x);
    }
    return out;
}

}  // namespace

OptimizerUpdate fused_optimizer_update(const RowGradients& grads,
                                       const kernels::FusedOptimizerParams& optim,
                                       int64_t dim,
                                       const std::vector<double>& weights,
                                       const std::vector<double>& state1,
                                       const std::vector<double>& state2) {
    OptimizerUpdate out{with_abs_mag(weights), with_abs_mag(state1), with_abs_mag(state2)};
    const int64_t state_dim = optim.type == OptimType::kExactRowWiseAdagrad ? 1 : dim;
    for (size_t u = 0; u < grads.rows.size(); ++u) {
        const int64_t row = grads.rows[u];
        const size_t s = at(row * state_dim);
        const bool has1 = !state1.empty(), has2 = !state2.empty();
        const RowUpdate r{
            &out.weights.value[at(row * dim)],     &out.weights.mag[at(row * dim)],
            has1 ? &out.state1.value[s] : nullptr, has1 ? &out.state1.mag[s] : nullptr,
            has2 ? &out.state2.value[s] : nullptr, has2 ? &out.state2.mag[s] : nullptr};
        update_row(optim, dim, &grads.grad[u * at(dim)], &grads.mag[u * at(dim)], r);
    }
    return out;
}

}  // namespace shardrec::ref
