// Linear on the CPU: one cblas_sgemm for the product, then a bias + activation epilogue over
// the output rows. Backward forms g = grad_y * act'(y) and grad_b in one pass over the rows,
// then two sgemms. Letters: B rows, I inputs, O outputs.
#include <cblas.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/linear.h"

#include "engine/core/error.h"
#include "kernels/linear.h"

namespace shardrec::kernels::cpu {
namespace {

// Rows per epilogue block in the panel strategy: 64 rows x O floats stay in L2 (1 MiB here)
// up to O = 4096.
constexpr int64_t kPanelRows = 64;

inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// y_b = act(y_b + bias) for rows [0, rows); the bias add and the activation share one pass.
void bias_activation_epilogue(float* y, const float* bias, Activation act, int64_t rows,
                              int64_t O) {
    for (int64_t b = 0; b < rows; ++b) {
        float* yb = y + b * O;  // yb is y[b, :], O floats
        if (bias != nullptr) {
            for (int64_t o = 0; o < O; ++o) yb[o] += bias[o];
        }
        switch (act) {
            case Activation::kIdentity:
                break;
            case Activation::kRelu:
                for (int64_t o = 0; o < O; ++o) yb[o] = yb[o] > 0.0f ? yb[o] : 0.0f;
                break;
            case Activation::kSigmoid:
                for (int64_t o = 0; o < O; ++o) yb[o] = sigmoid(yb[o]);
                break;
        }
    }
}

int to_int(int64_t v) {
    SR_DCHECK(v >= 0 && v <= INT32_MAX, "sgemm size {} does not fit OpenBLAS's int", v);
    return static_cast<int>(v);
}

}  // namespace

void sgemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
                tb == Trans::kYes ? CblasTrans : CblasNoTrans, to_int(m), to_int(n), to_int(k),
                1.0f, a, to_int(lda), b, to_int(ldb), beta, c, to_int(ldc));
}

float* scratch_floats(size_t n) {
    thread_local std::vector<float> buffer;
    if (buffer.size() < n) buffer.resize(n);
    return buffer.data();
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Activation act,
                    Tensor& y) {
    const int64_t B = x.size(0), I = x.size(1), O = w.size(0);
    const float* bias_p = bias != nullptr ? bias->data<float>() : nullptr;
    sgemm(Trans::kNo, Trans::kYes, B, O, I, x.data<float>(), I, w.data<float>(), I, 0.0f,
          y.data<float>(), O);
    bias_activation_epilogue(y.data<float>(), bias_p, act, B, O);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& grad_y,
                     Activation act, Tensor* grad_x, Tensor& grad_w, Tensor* grad_b) {
    const int64_t B = x.size(0), I = x.size(1), O = w.size(0);
    const float* gy = grad_y.data<float>();
    const float* yp = y.data<float>();
    // g = grad_y * act'(y); identity reuses grad_y as is.
    const float* g = gy;
    if (act != Activation::kIdentity) {
        float* gs = scratch_floats(static_cast<size_t>(B * O));
        for (int64_t i = 0; i < B * O; ++i) {
            const float d = act == Activation::kRelu ? (yp[i] > 0.0f ? 1.0f : 0.0f)
                                                     : yp[i] * (1.0f - yp[i]);
            gs[i] = gy[i] * d;
        }
        g = gs;
    }
    if (grad_b != nullptr) {
        // Rows in order: the sum does not depend on how the GEMMs are threaded.
        float* gb = grad_b->data<float>();
        for (int64_t o = 0; o < O; ++o) gb[o] = 0.0f;
        for (int64_t b = 0; b < B; ++b) {
            const float* gr = g + b * O;
            for (int64_t o = 0; o < O; ++o) gb[o] += gr[o];
        }
    }
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
