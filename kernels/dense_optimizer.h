// Dense optimizer updates, in place on f32 parameters, elementwise (so trivially deterministic),
// with torch.optim semantics: weight decay is L2 (wd * p added to the gradient), as in
// torch.optim.SGD, Adagrad and Adam (not AdamW). Embedding tables use the fused optimizers in the
// embedding backward instead. All tensors: f32, same shape, same device, contiguous.
// The rules themselves: kernels/optimizer_rules.h, shared with the embedding updates.
#pragma once

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

// p -= lr * (g + wd * p)
void sgd_update(Tensor& param, const Tensor& grad, float lr, float weight_decay, Stream& stream);

// g' = g + wd * p;  state_sum += g'^2;  p -= lr * g' / (sqrt(state_sum) + eps)
void adagrad_update(Tensor& param,
                    const Tensor& grad,
                    Tensor& state_sum,
                    float lr,
                    float eps,
                    float weight_decay,
                    Stream& stream);

struct AdamHyperParams {
    float lr = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;
    int64_t step = 1;  // 1-based count of updates including this one (bias correction)
};

// g' = g + wd * p;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
// p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)     (t = step)
void adam_update(Tensor& param,
                 const Tensor& grad,
                 Tensor& exp_avg,
                 Tensor& exp_avg_sq,
                 const AdamHyperParams& hp,
                 Stream& stream);

namespace cpu {
void sgd_update(Tensor& param, const Tensor& grad, float lr, float weight_decay);
void adagrad_update(
    Tensor& param, const Tensor& grad, Tensor& state_sum, float lr, float eps, float weight_decay);
void adam_update(Tensor& param,
                 const Tensor& grad,
                 Tensor& exp_avg,
                 Tensor& exp_avg_sq,
                 const AdamHyperParams& hp);
}  // namespace cpu

namespace cuda {
void sgd_update(Tensor& param, const Tensor& grad, float lr, float weight_decay, Stream& stream);
void adagrad_update(Tensor& param,
                    const Tensor& grad,
                    Tensor& state_sum,
                    float lr,
                    float eps,
                    float weight_decay,
                    Stream& stream);
void adam_update(Tensor& param,
                 const Tensor& grad,
                 Tensor& exp_avg,
                 Tensor& exp_avg_sq,
                 const AdamHyperParams& hp,
                 Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
