// BCE-with-logits on the CPU: one pass; the loss is summed in double in row order, so the mean
// is deterministic and accurate for any batch size.
#include "kernels/bce_with_logits.h"

#include <cmath>

namespace shardrec::kernels::cpu {

void bce_with_logits(const Tensor& logits,
                     const Tensor& labels,
                     Tensor& loss,
                     Tensor& grad_logits) {
    const int64_t B = logits.numel();
    const float* xp = logits.data<float>();
    const float* yp = labels.data<float>();
    float* gp = grad_logits.data<float>();
    const float inv_b = 1.0f / static_cast<float>(B);
    double total = 0.0;
    for (int64_t b = 0; b < B; ++b) {
        const float x = xp[b], y = yp[b];
        const float t = std::exp(-std::fabs(x));  // in (0, 1]: never overflows
        total += static_cast<double>(std::fmax(x, 0.0f) - x * y + std::log1p(t));
        // sigmoid(x) from t without overflow: 1/(1+t) for x >= 0, t/(1+t) for x < 0.
        const float sig = x >= 0.0f ? 1.0f / (1.0f + t) : t / (1.0f + t);
        gp[b] = (sig - y) * inv_b;
    }
    loss.data<float>()[0] = static_cast<float>(total / static_cast<double>(B));
}

}  // namespace shardrec::kernels::cpu
