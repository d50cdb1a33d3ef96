// Cross layer on the CPU: the products are sgemms (xl W^T, or xl V^T then W^T), and one epilogue
// pass per row adds the bias, scales by x0 and adds the residual. Backward forms
// gu = grad_out * x0 together with grad_b and the grad_x0 update in one pass, then runs the
// weight and input gradients as sgemms (grad_xl starts as grad_out and takes beta = 1).
#include "kernels/crossnet.h"

#include <cstring>

#include "kernels/cpu/linear.h"

namespace shardrec::kernels::cpu {

// Single-threaded epilogues between the sgemms, as in kernels/cpu/linear.cpp. Built for AVX-512 too
// and picked at run time; the file is compiled without fused multiply-adds (CMakeLists.txt), so
// both builds round alike, bit for bit.
namespace {

// u += bias (per column); out = x0 * u + xl. x0 and xl may be one tensor.
SR_AVX512_CLONES void forward_epilogue(int64_t B,
                                       int64_t N,
                                       const float* __restrict bias,
                                       const float* __restrict x0,
                                       const float* __restrict xl,
                                       float* __restrict u,
                                       float* __restrict out) {
    for (int64_t b = 0; b < B; ++b) {
        const int64_t row = b * N;  // row b of every [B, N] tensor
        for (int64_t n = 0; n < N; ++n) {
            const float un = u[row + n] + bias[n];
            u[row + n] = un;
            out[row + n] = x0[row + n] * un + xl[row + n];
        }
    }
}

// gu = g * x0; gx0 += g * u; gb = the column sums of gu, over the rows in order.
SR_AVX512_CLONES void backward_epilogue(int64_t B,
                                        int64_t N,
                                        const float* __restrict g,
                                        const float* __restrict x0,
                                        const float* __restrict u,
                                        float* __restrict gu,
                                        float* __restrict gx0,
                                        float* __restrict gb) {
    for (int64_t n = 0; n < N; ++n) {
        gb[n] = 0.0f;
    }
    for (int64_t b = 0; b < B; ++b) {
        const int64_t row = b * N;
        for (int64_t n = 0; n < N; ++n) {
            const float gun = g[row + n] * x0[row + n];
            gu[row + n] = gun;
            gx0[row + n] += g[row + n] * u[row + n];
            gb[n] += gun;
        }
    }
}

}  // namespace

void crossnet_forward(const Tensor& x0,
                      const Tensor& xl,
                      const Tensor& w,
                      const Tensor* v,
                      const Tensor& bias,
                      Tensor& out,
                      Tensor& u,
                      Tensor* vx) {
    const int64_t B = x0.size(0), N = x0.size(1);
    const float* xlp = xl.data<float>();
    float* up = u.data<float>();
    if (v == nullptr) {
        sgemm(Trans::kNo, Trans::kYes, B, N, N, xlp, N, w.data<float>(), N, 0.0f, up, N);
    } else {
        const int64_t r = v->size(0);
        float* vxp = vx->data<float>();
        sgemm(Trans::kNo, Trans::kYes, B, r, N, xlp, N, v->data<float>(), N, 0.0f, vxp, r);
        sgemm(Trans::kNo, Trans::kYes, B, N, r, vxp, r, w.data<float>(), r, 0.0f, up, N);
    }
    forward_epilogue(B, N, bias.data<float>(), x0.data<float>(), xlp, up, out.data<float>());
}

void crossnet_backward(const Tensor& x0,
                       const Tensor& xl,
                       const Tensor& w,
                       const Tensor* v,
                       const Tensor& u,
                       const Tensor* vx,
                       const Tensor& grad_out,
                       Tensor& grad_x0,
                       Tensor& grad_xl,
                       Tensor& grad_w,
                       Tensor* grad_v,
                       Tensor& grad_b) {
    const int64_t B = x0.size(0), N = x0.size(1);
    const int64_t r = v != nullptr ? v->size(0) : 0;
    float* gu = scratch_floats(static_cast<size_t>(B * (N + r)));  // [B, N] then gv [B, r]
    const float* gop = grad_out.data<float>();
    const float* x0p = x0.data<float>();
    const float* up = u.data<float>();
    float* gx0 = grad_x0.data<float>();
    backward_epilogue(B, N, gop, x0p, up, gu, gx0, grad_b.data<float>());
    const float* xlp = xl.data<float>();
    float* gxl = grad_xl.data<float>();
    if (gxl == gx0) {  // layer 0: the residual adds onto the accumulated grad_x0
        for (int64_t i = 0; i < B * N; ++i) {
            gxl[i] += gop[i];
        }
    } else {
        std::memcpy(gxl, gop, static_cast<size_t>(B * N) * sizeof(float));
    }
    const Bf16OperandScope gu_once(gu, B, N, N);  // bf16 math: read by two GEMMs
    if (v == nullptr) {
        // grad_w [N, N] = gu^T xl;  grad_xl += gu W
        sgemm(Trans::kYes, Trans::kNo, N, N, B, gu, N, xlp, N, 0.0f, grad_w.data<float>(), N);
        sgemm(Trans::kNo, Trans::kNo, B, N, N, gu, N, w.data<float>(), N, 1.0f, gxl, N);
        return;
    }
    float* gv = gu + B * N;
    // gv [B, r] = gu W;  grad_w [N, r] = gu^T vx;  grad_v [r, N] = gv^T xl;  grad_xl += gv V
    sgemm(Trans::kNo, Trans::kNo, B, r, N, gu, N, w.data<float>(), r, 0.0f, gv, r);
    const Bf16OperandScope gv_once(gv, B, r, r);
    sgemm(Trans::kYes, Trans::kNo, N, r, B, gu, N, vx->data<float>(), r, 0.0f, grad_w.data<float>(),
          r);
    sgemm(Trans::kYes, Trans::kNo, r, N, B, gv, r, xlp, N, 0.0f, grad_v->data<float>(), N);
    sgemm(Trans::kNo, Trans::kNo, B, N, r, gv, r, v->data<float>(), N, 1.0f, gxl, N);
}

}  // namespace shardrec::kernels::cpu
