// Dense optimizer updates on the CPU: elementwise loops in f32 (built for AVX-512 too), with the
// bias corrections of Adam computed once per call in double (as torch computes them on the host).
#include "kernels/dense_optimizer.h"

#include <cmath>

#include "kernels/cpu/avx512_clones.h"
#include "kernels/optimizer_rules.h"

namespace shardrec::kernels::cpu {
namespace {

// Elements below which an update stays on the calling thread (updates are elementwise).
constexpr int64_t kMinElementsForThreads = 1 << 15;

}  // namespace

SR_AVX512_CLONES void sgd_update(Tensor& param, const Tensor& grad, float lr, float weight_decay) {
    const int64_t n = param.numel();
    float* p = param.data<float>();
    const float* g = grad.data<float>();
#pragma omp parallel for schedule(static) if (n >= kMinElementsForThreads)
    for (int64_t i = 0; i < n; ++i) {
        p[i] = rules::sgd(p[i], rules::weight_decay(g[i], p[i], weight_decay), lr);
    }
}

SR_AVX512_CLONES void adagrad_update(
    Tensor& param, const Tensor& grad, Tensor& state_sum, float lr, float eps, float weight_decay) {
    const int64_t n = param.numel();
    float* p = param.data<float>();
    const float* g = grad.data<float>();
    float* s = state_sum.data<float>();
#pragma omp parallel for schedule(static) if (n >= kMinElementsForThreads)
    for (int64_t i = 0; i < n; ++i) {
        const float gi = rules::weight_decay(g[i], p[i], weight_decay);
        p[i] = rules::adagrad(p[i], gi, s[i], lr, eps);
    }
}

SR_AVX512_CLONES void adam_update(Tensor& param,
                                  const Tensor& grad,
                                  Tensor& exp_avg,
                                  Tensor& exp_avg_sq,
                                  const AdamHyperParams& hp) {
    const int64_t n = param.numel();
    float* p = param.data<float>();
    const float* g = grad.data<float>();
    float* m = exp_avg.data<float>();
    float* v = exp_avg_sq.data<float>();
    const float step_size =
        static_cast<float>(hp.lr / rules::adam_bias_correction(hp.beta1, hp.step));
    const float bc2_sqrt =
        static_cast<float>(std::sqrt(rules::adam_bias_correction(hp.beta2, hp.step)));
    const float b1 = hp.beta1, b2 = hp.beta2;
#pragma omp parallel for schedule(static) if (n >= kMinElementsForThreads)
    for (int64_t i = 0; i < n; ++i) {
        const float gi = rules::weight_decay(g[i], p[i], hp.weight_decay);
        rules::adam_moments(gi, b1, b2, m[i], v[i]);
        p[i] = rules::adam_torch(p[i], m[i], v[i], step_size, bc2_sqrt, hp.eps);
    }
}

}  // namespace shardrec::kernels::cpu
