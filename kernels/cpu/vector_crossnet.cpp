// Vector cross layer on the CPU: one pass per row (dot, then the fused output), all O(B N), so
// no GEMM. Sums over N and over rows run in index order.
#include "kernels/vector_crossnet.h"

namespace shardrec::kernels::cpu {
namespace {

// Rows below which forward stays on the calling thread (rows are independent). Backward stays
// serial: grad_w and grad_b sum over rows in order.
constexpr int64_t kMinRowsForThreads = 64;

}  // namespace

void vector_crossnet_forward(const Tensor& x0,
                             const Tensor& xl,
                             const Tensor& w,
                             const Tensor& bias,
                             Tensor& out,
                             Tensor& s) {
    const int64_t B = x0.size(0), N = x0.size(1);
    const float* x0p = x0.data<float>();
    const float* xlp = xl.data<float>();
    const float* wp = w.data<float>();
    const float* bp = bias.data<float>();
    float* op = out.data<float>();
    float* sp = s.data<float>();
#pragma omp parallel for schedule(static) if (B >= kMinRowsForThreads)
    for (int64_t b = 0; b < B; ++b) {
        const int64_t row = b * N;  // row b of every [B, N] tensor
        float dot = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
            dot += xlp[row + n] * wp[n];
        }
        sp[b] = dot;
        for (int64_t n = 0; n < N; ++n) {
            op[row + n] = x0p[row + n] * dot + bp[n] + xlp[row + n];
        }
    }
}

void vector_crossnet_backward(const Tensor& x0,
                              const Tensor& xl,
                              const Tensor& w,
                              const Tensor& s,
                              const Tensor& grad_out,
                              Tensor& grad_x0,
                              Tensor& grad_xl,
                              Tensor& grad_w,
                              Tensor& grad_b) {
    const int64_t B = x0.size(0), N = x0.size(1);
    const float* x0p = x0.data<float>();
    const float* xlp = xl.data<float>();
    const float* wp = w.data<float>();
    const float* sp = s.data<float>();
    const float* gop = grad_out.data<float>();
    float* gx0 = grad_x0.data<float>();
    float* gxl = grad_xl.data<float>();
    float* gw = grad_w.data<float>();
    float* gb = grad_b.data<float>();
    for (int64_t n = 0; n < N; ++n) {
        gw[n] = 0.0f;
        gb[n] = 0.0f;
    }
    for (int64_t b = 0; b < B; ++b) {
        const int64_t row = b * N;
        float gs = 0.0f;  // d loss / d s_b = grad_out_b . x0_b
        for (int64_t n = 0; n < N; ++n) {
            gs += gop[row + n] * x0p[row + n];
        }
        for (int64_t n = 0; n < N; ++n) {
            const float g = gop[row + n];
            const float gx0_new = gx0[row + n] + g * sp[b];
            const float gxl_new = g + gs * wp[n];
            if (gxl == gx0) {  // layer 0: one tensor takes both
                gx0[row + n] = gx0_new + gxl_new;
            } else {
                gx0[row + n] = gx0_new;
                gxl[row + n] = gxl_new;
            }
            gw[n] += gs * xlp[row + n];
            gb[n] += g;
        }
    }
}

}  // namespace shardrec::kernels::cpu
