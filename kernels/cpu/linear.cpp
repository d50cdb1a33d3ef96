// Linear on the CPU: the bias is pre-written into y and one cblas_sgemm accumulates onto it,
// then relu/sigmoid run as one elementwise pass. Backward forms g = grad_y * act'(y), sums
// grad_b over rows in order, then runs two sgemms. Letters: B rows, I inputs, O outputs.
#include "kernels/cpu/linear.h"

#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "kernels/linear.h"

namespace shardrec::kernels::cpu {

// The elementwise passes here stay on the calling thread: for a memory-bound pass the second
// thread gained ~20% at best. (Measured with OpenBLAS's pthreads build, where an OpenMP region
// between sgemms also starved OpenBLAS's own workers in the next one: sgemm then a 2-thread relu
// pass, B = 2048, I = 13, O = 512, took 6-12 ms instead of 0.9 ms. The OpenMP build that
// CMakeLists.txt links runs its GEMMs on the same threads.)

SR_AVX512_CLONES void activation_forward(Activation act, float* y, int64_t n) {
    switch (act) {
        case Activation::kRelu:
            for (int64_t i = 0; i < n; ++i) {
                y[i] = y[i] > 0.0f ? y[i] : 0.0f;
            }
            return;
        case Activation::kSigmoid:
            for (int64_t i = 0; i < n; ++i) {
                y[i] = apply_activation(Activation::kSigmoid, y[i]);
            }
            return;
        case Activation::kIdentity:
            return;
    }
}

SR_AVX512_CLONES void activation_backward(
    Activation act, const float* grad_y, const float* y, float* g, int64_t n) {
    // In place and out of place are separate loops (the vectoriser's overlap check would send
    // g == grad_y down its scalar path), and act' is a named value: written inline in the
    // product, GCC 12 turns ReLU's select back into a branch.
    auto run = [&](auto&& grad) {
        if (g == grad_y) {
            for (int64_t i = 0; i < n; ++i) {
                const float d = grad(y[i]);
                g[i] *= d;
            }
        } else {
            for (int64_t i = 0; i < n; ++i) {
                const float d = grad(y[i]);
                g[i] = grad_y[i] * d;
            }
        }
    };
    switch (act) {
        case Activation::kRelu:
            return run([](float v) { return v > 0.0f ? 1.0f : 0.0f; });
        case Activation::kSigmoid:
            return run([](float v) { return v * (1.0f - v); });
        case Activation::kIdentity:
            if (g != grad_y) {
                std::memcpy(g, grad_y, sizeof(float) * static_cast<size_t>(n));
            }
            return;
    }
}

float* scratch_floats(size_t n) {
    thread_local std::vector<float> buffer;
    if (buffer.size() < n) {
        buffer.resize(n);
    }
    return buffer.data();
}

namespace {

// g = grad_y * act'(y) into gs (identity: none, g is grad_y) and grad_b = the sum of g's rows in
// row order (when gb is not null), in one pass over the rows.
SR_AVX512_CLONES void activation_grad_and_bias(Activation act,
                                               int64_t B,
                                               int64_t O,
                                               const float* grad_y,
                                               const float* y,
                                               float* gs,
                                               float* gb) {
    if (gb != nullptr) {
        std::memset(gb, 0, sizeof(float) * static_cast<size_t>(O));
    }
    for (int64_t b = 0; b < B; ++b) {
        const int64_t row = b * O;
        if (gs != nullptr) {
            activation_backward(act, grad_y + row, y + row, gs + row, O);
        }
        if (gb != nullptr) {
            const float* __restrict gr = gs != nullptr ? gs + row : grad_y + row;
            float* __restrict sum = gb;
            for (int64_t o = 0; o < O; ++o) {
                sum[o] += gr[o];
            }
        }
    }
}

}  // namespace

// The bias is written into y first and the sgemm accumulates onto it (beta = 1): OpenBLAS
// makes a pass over C for any beta, zeroing it when beta = 0, so the bias costs no extra pass.
// Measured at B = 2048 here: I = 13, O = 512 takes 0.7 ms this way against 1.2 ms for sgemm
// then a bias + relu pass (panels of 32..512 rows, to keep the epilogue in L2, were no better);
// for large I the epilogue is under 3% either way. Only relu/sigmoid need a second pass.
void linear_forward(
    const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& y) {
    const int64_t B = x.size(0), I = x.size(1), O = w.size(0);
    float* yp = y.data<float>();
    if (bias != nullptr) {
        const float* bp = bias->data<float>();
        for (int64_t b = 0; b < B; ++b) {
            std::memcpy(yp + b * O, bp, sizeof(float) * O);
        }
    }
    sgemm(Trans::kNo, Trans::kYes, B, O, I, x.data<float>(), I, w.data<float>(), I,
          bias != nullptr ? 1.0f : 0.0f, yp, O);
    activation_forward(act, yp, B * O);
}

void linear_backward(const Tensor& x,
                     const Tensor& w,
                     const Tensor& y,
                     const Tensor& grad_y,
                     Activation act,
                     Tensor* grad_x,
                     Tensor& grad_w,
                     Tensor* grad_b) {
    const int64_t B = x.size(0), I = x.size(1), O = w.size(0);
    const float* gy = grad_y.data<float>();
    const float* yp = y.data<float>();
    float* gs = act != Activation::kIdentity ? scratch_floats(static_cast<size_t>(B * O)) : nullptr;
    activation_grad_and_bias(act, B, O, gy, yp, gs,
                             grad_b != nullptr ? grad_b->data<float>() : nullptr);
    const float* g = gs != nullptr ? gs : gy;
    const Bf16OperandScope g_once(g, B, O, O);  // bf16 math: read by both GEMMs below
    // grad_w [O, I] = g^T [O, B] x [B, I]
    sgemm(Trans::kYes, Trans::kNo, O, I, B, g, O, x.data<float>(), I, 0.0f, grad_w.data<float>(),
          I);
    if (grad_x != nullptr) {
        // grad_x [B, I] = g [B, O] w [O, I]
        sgemm(Trans::kNo, Trans::kNo, B, I, O, g, O, w.data<float>(), I, 0.0f,
              grad_x->data<float>(), I);
    }
}

}  // namespace shardrec::kernels::cpu
