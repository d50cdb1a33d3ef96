#include "test/reference/bce_with_logits.h"

#include <cmath>

namespace shardrec::ref {

BceWithLogits bce_with_logits(const std::vector<double>& logits,
                              const std::vector<double>& labels) {
    const size_t B = logits.size();
    BceWithLogits r{DenseValues(1), DenseValues(B)};
    for (size_t b = 0; b < B; ++b) {
        const double x = logits[b], y = labels[b];
        // log(1 + e^x) = max(x, 0) + log1p(e^-|x|), exact in double for any x.
        const double softplus = std::fmax(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
        r.loss.value[0] += (softplus - x * y) / static_cast<double>(B);
        r.loss.mag[0] += (softplus + std::fabs(x * y)) / static_cast<double>(B);
        const double sig = 1.0 / (1.0 + std::exp(-x));
        r.grad.value[b] = (sig - y) / static_cast<double>(B);
        r.grad.mag[b] = (sig + std::fabs(y)) / static_cast<double>(B);
    }
    return r;
}

}  // namespace shardrec::ref
