// SwishLayerNorm on the CPU, one row at a time. Statistics use two passes (mean, then centred
// squares) so a large mean does not cancel the variance. Backward recomputes xhat and the
// sigmoid from the saved mean/rstd rather than storing them, and sums the gamma/beta gradients
// over rows in order.
#include "kernels/swish_layer_norm.h"

#include <cmath>

namespace shardrec::kernels::cpu {
namespace {

// Rows below which forward stays on the calling thread (rows are independent). Backward stays
// serial: grad_gamma and grad_beta sum over rows in order.
constexpr int64_t kMinRowsForThreads = 64;

}  // namespace

void swish_layer_norm_forward(const Tensor& x,
                              const Tensor& gamma,
                              const Tensor& beta,
                              float eps,
                              Tensor& y,
                              Tensor& mean,
                              Tensor& rstd) {
    const int64_t R = x.size(0), N = x.size(1);
    const float* xp = x.data<float>();
    const float* gp = gamma.data<float>();
    const float* bp = beta.data<float>();
    float* yp = y.data<float>();
    float* mp = mean.data<float>();
    float* rp = rstd.data<float>();
#pragma omp parallel for schedule(static) if (R >= kMinRowsForThreads)
    for (int64_t i = 0; i < R; ++i) {
        const float* xr = xp + i * N;  // x[i, :], N floats
        float sum = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
            sum += xr[n];
        }
        const float mu = sum / static_cast<float>(N);
        float sq = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
            sq += (xr[n] - mu) * (xr[n] - mu);
        }
        const float rs = 1.0f / std::sqrt(sq / static_cast<float>(N) + eps);
        mp[i] = mu;
        rp[i] = rs;
        float* yr = yp + i * N;
        for (int64_t n = 0; n < N; ++n) {
            const float z = gp[n] * ((xr[n] - mu) * rs) + bp[n];
            yr[n] = xr[n] / (1.0f + std::exp(-z));
        }
    }
}

void swish_layer_norm_backward(const Tensor& x,
                               const Tensor& gamma,
                               const Tensor& beta,
                               const Tensor& mean,
                               const Tensor& rstd,
                               const Tensor& grad_y,
                               Tensor& grad_x,
                               Tensor& grad_gamma,
                               Tensor& grad_beta) {
    const int64_t R = x.size(0), N = x.size(1);
    const float* xp = x.data<float>();
    const float* gp = gamma.data<float>();
    const float* bp = beta.data<float>();
    const float* gyp = grad_y.data<float>();
    float* gxp = grad_x.data<float>();
    float* ggp = grad_gamma.data<float>();
    float* gbp = grad_beta.data<float>();
    for (int64_t n = 0; n < N; ++n) {
        ggp[n] = 0.0f;
        gbp[n] = 0.0f;
    }
    const float inv_n = 1.0f / static_cast<float>(N);
    for (int64_t i = 0; i < R; ++i) {
        const float* xr = xp + i * N;
        const float* gyr = gyp + i * N;
        float* gxr = gxp + i * N;  // first holds grad_xhat, then grad_x
        const float mu = mean.data<float>()[i], rs = rstd.data<float>()[i];
        // dY/dz = x s (1 - s); grad_xhat = gamma dY/dz; direct term grad_y s kept in gxr.
        float sum_gh = 0.0f, sum_gh_xhat = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
            const float xhat = (xr[n] - mu) * rs;
            const float s = 1.0f / (1.0f + std::exp(-(gp[n] * xhat + bp[n])));
            const float gz = gyr[n] * xr[n] * s * (1.0f - s);
            ggp[n] += gz * xhat;
            gbp[n] += gz;
            const float gh = gz * gp[n];
            sum_gh += gh;
            sum_gh_xhat += gh * xhat;
            gxr[n] = gh;
        }
        const float m1 = sum_gh * inv_n, m2 = sum_gh_xhat * inv_n;
        for (int64_t n = 0; n < N; ++n) {
            const float xhat = (xr[n] - mu) * rs;
            const float s = 1.0f / (1.0f + std::exp(-(gp[n] * xhat + bp[n])));
            gxr[n] = gyr[n] * s + rs * (gxr[n] - m1 - xhat * m2);
        }
    }
}

}  // namespace shardrec::kernels::cpu
