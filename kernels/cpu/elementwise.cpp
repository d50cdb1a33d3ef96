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

void fill_(Tensor& a, float value) {
    float* x = a.data<float>();
    const int64_t n = a.numel();
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
    for (int64_t i = 0; i < n; ++i)
        x[i] = value;
}

void fill_rows(const FillRows& p) {
#pragma omp parallel for schedule(static) if (p.n * p.width > (int64_t{1} << 16))
    for (int64_t i = 0; i < p.n; ++i) {
        float* row = p.a + p.which[i] * p.width;
        for (int64_t c = 0; c < p.width; ++c)
            row[c] = p.value;
    }
}

void columns_axpy(const ColumnsAxpy& p) {
#pragma omp parallel for schedule(static) if (p.rows * p.n > (int64_t{1} << 16))
    for (int64_t b = 0; b < p.rows; ++b) {
        const float s = p.row_divisor != nullptr ? p.divisor * p.row_divisor[b] : p.divisor;
        float* d = p.dst + b * p.dst_stride;
        const float* x = p.src + b * p.src_stride;
        if (p.reciprocal) {
            const float r = 1.0f / s;
            for (int64_t j = 0; j < p.n; ++j)
                d[j] = p.accumulate ? d[j] + x[j] * r : x[j] * r;
        } else {
            for (int64_t j = 0; j < p.n; ++j)
                d[j] = p.accumulate ? d[j] + x[j] / s : x[j] / s;
        }
    }
}

}  // namespace shardrec::kernels::cpu
