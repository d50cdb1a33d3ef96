// Dense optimizer updates on the CPU: elementwise loops in f32, with the bias corrections of
// Adam computed once per call in double (as torch computes them on the host).
#include "kernels/dense_optimizer.h"

#include <cmath>

namespace shardrec::kernels::cpu {
namespace {

// Elements below which an update stays on the calling thread (updates are elementwise).
constexpr int64_t kMinElementsForThreads = 1 << 15;

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, float lr, float weight_decay) {
    const int64_t n = param.numel();
    float* p = param.data<float>();
    const float* g = grad.data<float>();
#pragma omp parallel for schedule(static) if (n >= kMinElementsForThreads)
    for (int64_t i = 0; i < n; ++i) {
        p[i] -= lr * (g[i] + weight_decay * p[i]);
    }
}

void adagrad_update(
    Tensor& param, const Tensor& grad, Tensor& state_sum, float lr, float eps, float weight_decay) {
    const int64_t n = param.numel();
    float* p = param.data<float>();
    const float* g = grad.data<float>();
    float* s = state_sum.data<float>();
#pragma omp parallel for schedule(static) if (n >= kMinElementsForThreads)
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + weight_decay * p[i];
        s[i] += gi * gi;
        p[i] -= lr * gi / (std::sqrt(s[i]) + eps);
    }
}

void adam_update(Tensor& param,
                 const Tensor& grad,
                 Tensor& exp_avg,
                 Tensor& exp_avg_sq,
                 const AdamHyperParams& hp) {
    const int64_t n = param.numel();
    float* p = param.data<float>();
    const float* g = grad.data<float>();
    float* m = exp_avg.data<float>();
    float* v = exp_avg_sq.data<float>();
    const double t = static_cast<double>(hp.step);
    const float step_size = static_cast<float>(hp.lr / (1.0 - std::pow(hp.beta1, t)));
    const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(hp.beta2, t)));
    const float b1 = hp.beta1, b2 = hp.beta2;
#pragma omp parallel for schedule(static) if (n >= kMinElementsForThreads)
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + hp.weight_decay * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + hp.eps);
    }
}

}  // namespace shardrec::kernels::cpu
