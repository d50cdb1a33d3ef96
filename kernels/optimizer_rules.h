// The optimizer update rules, once, for one element or one row, host and device: the CPU and
// CUDA embedding updates (kernels/embedding_optimizer.h) and the dense optimizers
// (kernels/dense_optimizer.h) call these and keep only their loops, reductions and threads
// (FBGEMM defines each optimizer once and generates its kernels from it). All f32; each
// expression is written in the order the backends' bits depend on, so do not reassociate.
// The float64 reference (test/reference) shares no code with them, on purpose.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/core/rng.h"  // SR_HOST_DEVICE

namespace shardrec::kernels::rules {

SR_HOST_DEVICE inline float sqrt_f32(float x) {
#ifdef __CUDA_ARCH__
    return sqrtf(x);
#else
    return std::sqrt(x);
#endif
}

// L2 weight decay (torch.optim, FBGEMM's L2): the gradient plus wd times the weight.
SR_HOST_DEVICE inline float weight_decay(float g, float w, float wd) {
    return g + wd * w;
}

// SGD: the new weight. Also row-wise Adagrad's per-element step, with its row's rate as lr.
SR_HOST_DEVICE inline float sgd(float w, float g, float lr) {
    return w - lr * g;
}

// Exact Adagrad: sum_sq += g^2, then the new weight.
SR_HOST_DEVICE inline float adagrad(float w, float g, float& sum_sq, float lr, float eps) {
    const float sum = sum_sq + g * g;
    sum_sq = sum;
    return w - lr * g / (sqrt_f32(sum) + eps);
}

// Exact row-wise Adagrad: the row's sum_sq += mean_sq (the mean over the row of g^2, each
// backend sums it its own way), then the rate lr / (sqrt(sum_sq) + eps) of sgd() for every
// element of the row.
SR_HOST_DEVICE inline float rowwise_adagrad_rate(float& sum_sq,
                                                 float mean_sq,
                                                 float lr,
                                                 float eps) {
    const float sum = sum_sq + mean_sq;
    sum_sq = sum;
    return lr / (sqrt_f32(sum) + eps);
}

// Adam's moments: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2.
SR_HOST_DEVICE inline void adam_moments(float g, float beta1, float beta2, float& m, float& v) {
    const float m_new = beta1 * m + (1.f - beta1) * g;
    const float v_new = beta2 * v + (1.f - beta2) * g * g;
    m = m_new;
    v = v_new;
}

// 1 - beta^step in f64 (on the host, once per call), as torch and FBGEMM compute it.
inline double adam_bias_correction(float beta, int64_t step) {
    return 1.0 - std::pow(static_cast<double>(beta), static_cast<double>(step));
}

// Adam's new weight, FBGEMM TBE form (the embedding updates): the moments divided by their
// bias corrections bc1 = 1 - b1^t, bc2 = 1 - b2^t: w - lr m_hat / (sqrt(v_hat) + eps).
SR_HOST_DEVICE inline float adam(
    float w, float m, float v, float lr, float bc1, float bc2, float eps) {
    const float m_hat = m / bc1;
    const float v_hat = v / bc2;
    return w - lr * m_hat / (sqrt_f32(v_hat) + eps);
}

// Adam's new weight, torch.optim.Adam form (the dense optimizers): step_size = lr / bc1 and
// bc2_sqrt = sqrt(bc2) folded on the host: w - step_size m / (sqrt(v) / bc2_sqrt + eps).
SR_HOST_DEVICE inline float adam_torch(
    float w, float m, float v, float step_size, float bc2_sqrt, float eps) {
    return w - step_size * m / (sqrt_f32(v) / bc2_sqrt + eps);
}

}  // namespace shardrec::kernels::rules
