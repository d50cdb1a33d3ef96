// Element-wise ops on the CPU.
#include "kernels/elementwise.h"

namespace shardrec::kernels::cpu {

void add_(Tensor& a, const Tensor& b) {
    float* x = a.data<float>();
    const float* y = b.data<float>();
    const int64_t n = a.numel();
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
    for (int64_t i = 0; i < n; ++i)
        x[i] += y[i];
}

}  // namespace shardrec::kernels::cpu
