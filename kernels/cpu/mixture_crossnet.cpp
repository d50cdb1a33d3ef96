// Mixture cross layer on the CPU. Every product is an sgemm over the whole batch: the K experts'
// V projections are one [B, K r] GEMM (V is [K r, N] in memory), C and U are K GEMMs each on
// strided column blocks of the saved [B, K, r] / [B, K, N] tensors. Gate softmax, bias, x0
// scaling and the residual are elementwise passes. Backward mirrors this; gp of all experts is
// gathered into [B, K r] so grad_V and the V part of grad_xl are one GEMM each.
#include "kernels/mixture_crossnet.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/linear.h"

namespace shardrec::kernels::cpu {
namespace {

// Row-wise softmax of [B, K] in place: max-shifted, summed over k in order.
void softmax_rows(float* z, int64_t B, int64_t K) {
    for (int64_t b = 0; b < B; ++b) {
        float* zb = z + b * K;
        float mx = zb[0];
        for (int64_t k = 1; k < K; ++k) {
            mx = std::max(mx, zb[k]);
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            zb[k] = std::exp(zb[k] - mx);
            sum += zb[k];
        }
        for (int64_t k = 0; k < K; ++k) {
            zb[k] /= sum;
        }
    }
}

}  // namespace

void mixture_crossnet_forward(const Tensor& x0,
                              const Tensor& xl,
                              const MixtureCrossNetWeights& wt,
                              Activation act,
                              Tensor& out,
                              const MixtureCrossNetSaved& saved) {
    const int64_t B = x0.size(0), N = x0.size(1), K = wt.v->size(0), r = wt.v->size(1);
    const float* xlp = xl.data<float>();
    float* a1 = saved.a1->data<float>();  // [B, K, r]
    float* a2 = saved.a2->data<float>();  // [B, K, r]
    float* e = saved.e->data<float>();    // [B, K, N]
    // bf16 math: xl, a1 and a2 are rounded once for the GEMMs (and expert slices) that read them.
    const Bf16OperandScope xl_once(xlp, B, N, N);
    // a1 = g(xl V^T), all experts at once: V is [K r, N].
    sgemm(Trans::kNo, Trans::kYes, B, K * r, N, xlp, N, wt.v->data<float>(), N, 0.0f, a1, K * r);
    activation_forward(act, a1, B * K * r);
    const Bf16OperandScope a1_once(a1, B, K * r, K * r);
    for (int64_t k = 0; k < K; ++k) {  // a2_k = a1_k C_k^T, columns [k r, (k+1) r)
        sgemm(Trans::kNo, Trans::kYes, B, r, r, a1 + k * r, K * r, wt.c->data<float>() + k * r * r,
              r, 0.0f, a2 + k * r, K * r);
    }
    activation_forward(act, a2, B * K * r);
    const Bf16OperandScope a2_once(a2, B, K * r, K * r);
    for (int64_t k = 0; k < K; ++k) {  // e_k = a2_k U_k^T (+ b below)
        sgemm(Trans::kNo, Trans::kYes, B, N, r, a2 + k * r, K * r, wt.u->data<float>() + k * N * r,
              r, 0.0f, e + k * N, K * N);
    }
    float* probs = nullptr;
    if (K > 1) {
        probs = saved.probs->data<float>();
        sgemm(Trans::kNo, Trans::kYes, B, K, N, xlp, N, wt.gates->data<float>(), N, 0.0f, probs, K);
        softmax_rows(probs, B, K);
    }
    const float* bp = wt.bias->data<float>();
    const float* x0p = x0.data<float>();
    float* op = out.data<float>();
    for (int64_t b = 0; b < B; ++b) {
        float* ob = op + b * N;  // out[b, :]
        for (int64_t n = 0; n < N; ++n) {
            ob[n] = 0.0f;
        }
        for (int64_t k = 0; k < K; ++k) {
            float* ebk = e + (b * K + k) * N;  // e[b, k, :]
            const float p = probs != nullptr ? probs[b * K + k] : 1.0f;
            for (int64_t n = 0; n < N; ++n) {
                ebk[n] += bp[n];
                ob[n] += p * (x0p[b * N + n] * ebk[n]);
            }
        }
        for (int64_t n = 0; n < N; ++n) {
            ob[n] += xlp[b * N + n];
        }
    }
}

namespace {

// Gate backward (K > 1): gw_bk = sum_n grad_out * x0 * e_k, gz = p (gw - sum_j p_j gw_j);
// grad_gates += gz^T xl and grad_xl += gz G.
void gate_backward(const float* gop,
                   const float* x0p,
                   const float* xlp,
                   const float* e,
                   const float* probs,
                   const float* gates,
                   int64_t B,
                   int64_t N,
                   int64_t K,
                   float* gz,
                   float* grad_gates,
                   float* gxl) {
    for (int64_t b = 0; b < B; ++b) {
        float mean = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const float* ebk = e + (b * K + k) * N;
            float gw = 0.0f;
            for (int64_t n = 0; n < N; ++n) {
                gw += gop[b * N + n] * x0p[b * N + n] * ebk[n];
            }
            gz[b * K + k] = gw;
            mean += probs[b * K + k] * gw;
        }
        for (int64_t k = 0; k < K; ++k) {
            gz[b * K + k] = probs[b * K + k] * (gz[b * K + k] - mean);
        }
    }
    sgemm(Trans::kYes, Trans::kNo, K, N, B, gz, K, xlp, N, 1.0f, grad_gates, N);
    sgemm(Trans::kNo, Trans::kNo, B, N, K, gz, K, gates, N, 1.0f, gxl, N);
}

// Raw pointers of one backward call; scratch: ge [B, N], gq [B, r], gp [B, K r], gz [B, K].
struct BackwardView {
    int64_t B, N, K, r;
    Activation act;
    const float *gop, *x0, *a1, *a2, *e, *probs, *u, *c;
    float *gx0, *gb, *grad_u, *grad_c, *ge, *gq, *gp;
};

// Expert k: ge = p_k grad_out x0 (with grad_x0 += p_k grad_out e_k and grad_b += sum_b ge),
// grad_U_k = ge^T a2_k, gq = (ge U_k) g'(a2_k), grad_C_k = gq^T a1_k, and gp_k = gq C_k into
// columns [k r, (k+1) r) of gp (g'(a1) is applied to all experts at once afterwards).
void expert_backward(const BackwardView& v, int64_t k) {
    const int64_t B = v.B, N = v.N, K = v.K, r = v.r;
    for (int64_t b = 0; b < B; ++b) {
        const float p = v.probs != nullptr ? v.probs[b * K + k] : 1.0f;
        const float* ebk = v.e + (b * K + k) * N;  // e[b, k, :]
        for (int64_t n = 0; n < N; ++n) {
            const float g = p * v.gop[b * N + n];
            v.ge[b * N + n] = g * v.x0[b * N + n];
            v.gx0[b * N + n] += g * ebk[n];
            v.gb[n] += v.ge[b * N + n];
        }
    }
    const Bf16OperandScope ge_once(v.ge, B, N, N);  // bf16 math: read by two GEMMs
    sgemm(Trans::kYes, Trans::kNo, N, r, B, v.ge, N, v.a2 + k * r, K * r, 0.0f,
          v.grad_u + k * N * r, r);
    sgemm(Trans::kNo, Trans::kNo, B, r, N, v.ge, N, v.u + k * N * r, r, 0.0f, v.gq, r);
    for (int64_t b = 0; b < B; ++b) {
        activation_backward(v.act, v.gq + b * r, v.a2 + (b * K + k) * r, v.gq + b * r, r);
    }
    const Bf16OperandScope gq_once(v.gq, B, r, r);
    sgemm(Trans::kYes, Trans::kNo, r, r, B, v.gq, r, v.a1 + k * r, K * r, 0.0f,
          v.grad_c + k * r * r, r);
    sgemm(Trans::kNo, Trans::kNo, B, r, r, v.gq, r, v.c + k * r * r, r, 0.0f, v.gp + k * r, K * r);
}

}  // namespace

void mixture_crossnet_backward(const Tensor& x0,
                               const Tensor& xl,
                               const MixtureCrossNetWeights& wt,
                               Activation act,
                               const MixtureCrossNetSaved& saved,
                               const Tensor& grad_out,
                               const MixtureCrossNetGrads& grads) {
    const int64_t B = x0.size(0), N = x0.size(1), K = wt.v->size(0), r = wt.v->size(1);
    float* ge = scratch_floats(static_cast<size_t>(B * (N + r + K * r + 2 * K)));
    const BackwardView v{B,
                         N,
                         K,
                         r,
                         act,
                         grad_out.data<float>(),
                         x0.data<float>(),
                         saved.a1->data<float>(),
                         saved.a2->data<float>(),
                         saved.e->data<float>(),
                         K > 1 ? saved.probs->data<float>() : nullptr,
                         wt.u->data<float>(),
                         wt.c->data<float>(),
                         grads.x0->data<float>(),
                         grads.bias->data<float>(),
                         grads.u->data<float>(),
                         grads.c->data<float>(),
                         ge,
                         ge + B * N,
                         ge + B * (N + r)};
    float* gz = v.gp + B * K * r;
    const float* xlp = xl.data<float>();
    float* gxl = grads.xl->data<float>();
    if (gxl == v.gx0) {  // layer 0: the residual adds onto the accumulated grad_x0
        for (int64_t i = 0; i < B * N; ++i) {
            gxl[i] += v.gop[i];
        }
    } else {
        std::memcpy(gxl, v.gop, static_cast<size_t>(B * N) * sizeof(float));  // the residual
    }
    std::memset(v.gb, 0, static_cast<size_t>(N) * sizeof(float));
    if (K > 1) {
        gate_backward(v.gop, v.x0, xlp, v.e, v.probs, wt.gates->data<float>(), B, N, K, gz,
                      grads.gates->data<float>(), gxl);
    }
    {
        // bf16 math: the saved activations are rounded once for every expert's slices.
        const Bf16OperandScope a1_once(v.a1, B, K * r, K * r);
        const Bf16OperandScope a2_once(v.a2, B, K * r, K * r);
        for (int64_t k = 0; k < K; ++k) {
            expert_backward(v, k);
        }
    }
    activation_backward(act, v.gp, v.a1, v.gp, B * K * r);
    const Bf16OperandScope gp_once(v.gp, B, K * r, K * r);
    // grad_V = gp^T xl [K r, N]; grad_xl += gp V
    sgemm(Trans::kYes, Trans::kNo, K * r, N, B, v.gp, K * r, xlp, N, 0.0f, grads.v->data<float>(),
          N);
    sgemm(Trans::kNo, Trans::kNo, B, N, K * r, v.gp, K * r, wt.v->data<float>(), N, 1.0f, gxl, N);
}

}  // namespace shardrec::kernels::cpu
