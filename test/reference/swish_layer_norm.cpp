#include "test/reference/swish_layer_norm.h"

#include <cmath>

namespace shardrec::ref {
namespace {

double sigmoid(double z) {
    return 1.0 / (1.0 + std::exp(-z));
}

}  // namespace

SwishLayerNormForward swish_layer_norm_forward(const std::vector<double>& x,
                                               const std::vector<double>& gamma,
                                               const std::vector<double>& beta,
                                               double eps,
                                               int64_t R,
                                               int64_t N) {
    SwishLayerNormForward f{DenseValues(static_cast<size_t>(R * N)),
                            DenseValues(static_cast<size_t>(R)),
                            DenseValues(static_cast<size_t>(R))};
    for (int64_t i = 0; i < R; ++i) {
        const double* xr = x.data() + i * N;
        double mu = 0, mmu = 0;
        for (int64_t n = 0; n < N; ++n) {
            mu += xr[n] / N;
            mmu += std::fabs(xr[n]) / N;
        }
        double var = 0, mvar = 0;
        for (int64_t n = 0; n < N; ++n) {
            const double md = std::fabs(xr[n]) + mmu;  // mag of x - mean
            var += (xr[n] - mu) * (xr[n] - mu) / N;
            mvar += md * md / N;
        }
        const double v = var + eps;
        const double rs = 1.0 / std::sqrt(v);
        const double mrs = 0.5 * rs * (mvar + eps) / v + rs;  // d(v^-1/2) = -v^-3/2 dv / 2
        f.mean.value[i] = mu;
        f.mean.mag[i] = mmu;
        f.rstd.value[i] = rs;
        f.rstd.mag[i] = mrs;
        for (int64_t n = 0; n < N; ++n) {
            const double xhat = (xr[n] - mu) * rs;
            const double mxhat = (std::fabs(xr[n]) + mmu) * mrs;
            const double z = gamma[n] * xhat + beta[n];
            const double mz = std::fabs(gamma[n]) * mxhat + std::fabs(beta[n]);
            const double s = sigmoid(z);
            f.y.value[i * N + n] = xr[n] * s;
            f.y.mag[i * N + n] = std::fabs(xr[n]) * (s * (1 - s) * mz + s);
        }
    }
    return f;
}

SwishLayerNormGrads swish_layer_norm_backward(const std::vector<double>& x,
                                              const std::vector<double>& gamma,
                                              const std::vector<double>& beta,
                                              const std::vector<double>& mean,
                                              const std::vector<double>& rstd,
                                              const std::vector<double>& grad_y,
                                              int64_t R,
                                              int64_t N) {
    SwishLayerNormGrads g{DenseValues(static_cast<size_t>(R * N)),
                          DenseValues(static_cast<size_t>(N)), DenseValues(static_cast<size_t>(N))};
    std::vector<double> gh(static_cast<size_t>(N)), mgh(gh.size()), s(gh.size()), ms(gh.size());
    for (int64_t i = 0; i < R; ++i) {
        const double mu = mean[i], rs = rstd[i];
        double sum = 0, msum = 0, sumx = 0, msumx = 0;
        for (int64_t n = 0; n < N; ++n) {
            const int64_t k = i * N + n;
            const double xhat = (x[k] - mu) * rs;
            const double mxhat = (std::fabs(x[k]) + std::fabs(mu)) * std::fabs(rs);
            const double z = gamma[n] * xhat + beta[n];
            const double mz = std::fabs(gamma[n]) * mxhat + std::fabs(beta[n]);
            s[n] = sigmoid(z);
            ms[n] = s[n] * (1 - s[n]) * mz + s[n];
            // gz = grad_y x s (1 - s): d y / d z
            const double gz = grad_y[k] * x[k] * s[n] * (1 - s[n]);
            const double mgz = std::fabs(grad_y[k] * x[k]) * ms[n] * (1 + ms[n]);
            g.grad_gamma.value[n] += gz * xhat;
            g.grad_gamma.mag[n] += mgz * mxhat;
            g.grad_beta.value[n] += gz;
            g.grad_beta.mag[n] += mgz;
            gh[n] = gz * gamma[n];
            mgh[n] = mgz * std::fabs(gamma[n]);
            sum += gh[n];
            msum += mgh[n];
            sumx += gh[n] * xhat;
            msumx += mgh[n] * mxhat;
        }
        const double m1 = sum / N, mm1 = msum / N, m2 = sumx / N, mm2 = msumx / N;
        for (int64_t n = 0; n < N; ++n) {
            const int64_t k = i * N + n;
            const double xhat = (x[k] - mu) * rs;
            const double mxhat = (std::fabs(x[k]) + std::fabs(mu)) * std::fabs(rs);
            g.grad_x.value[k] = grad_y[k] * s[n] + rs * (gh[n] - m1 - xhat * m2);
            g.grad_x.mag[k] =
                std::fabs(grad_y[k]) * ms[n] + std::fabs(rs) * (mgh[n] + mm1 + mxhat * mm2);
        }
    }
    return g;
}

}  // namespace shardrec::ref
