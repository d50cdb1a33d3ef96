// CPU helpers shared by the dense CPU kernels (linear, cross nets): activations, a row-major
// sgemm wrapper with 64-bit sizes, and a thread-local scratch buffer. Internal to kernels/cpu/.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/avx512_clones.h"
#include "kernels/linear.h"

namespace shardrec::kernels::cpu {

inline float apply_activation(Activation act, float z) {
    switch (act) {
        case Activation::kRelu:
            return z > 0.0f ? z : 0.0f;
        case Activation::kSigmoid:
            return 1.0f / (1.0f + std::exp(-z));
        case Activation::kIdentity:
            break;
    }
    return z;
}

// act'(z) written in terms of y = act(z), so backward needs only the saved output.
inline float activation_grad_from_output(Activation act, float y) {
    switch (act) {
        case Activation::kRelu:
            return y > 0.0f ? 1.0f : 0.0f;
        case Activation::kSigmoid:
            return y * (1.0f - y);
        case Activation::kIdentity:
            break;
    }
    return 1.0f;
}

// y[i] = act(y[i]) for i < n, and g[i] = grad_y[i] * act'(y[i]) (g may be grad_y). The same
// arithmetic as the scalar functions above, with the switch outside the loop so that ReLU's
// select compiles to vector max / compare-and-mask instead of a branch per element, which random
// signs mispredict (measured: 1.5 ms of branch misses per 1M-element pass). Built for AVX-512 too.
void activation_forward(Activation act, float* y, int64_t n);
void activation_backward(Activation act, const float* grad_y, const float* y, float* g, int64_t n);

enum class Trans { kNo, kYes };

// C[m, n] = op(A) op(B) + beta * C, row-major, op(X) = X or X^T; lda/ldb/ldc are row strides of
// the stored matrices. In kernels::gemm_math() f32 one cblas_sgemm call (sizes checked to fit
// OpenBLAS's int), or ordered_sgemm in row-invariant mode; in bf16 oneDNN's matmul on operands
// rounded to bf16, f32 accumulation, beta 0 or 1 (kernels/cpu/gemm.cpp).
void sgemm(Trans ta,
           Trans tb,
           int64_t m,
           int64_t n,
           int64_t k,
           const float* a,
           int64_t lda,
           const float* b,
           int64_t ldb,
           float beta,
           float* c,
           int64_t ldc);

// C[m, n] = A op(B) + beta * C with each element one FMA chain over k in order from zero, then
// plus beta C: bits that depend on that row of A and that column of op(B) alone, whatever M, the
// threads or the CPU (kernels/cpu/gemm_ordered.cpp). sgemm's f32 path in row-invariant mode.
void ordered_sgemm(Trans tb,
                   int64_t m,
                   int64_t n,
                   int64_t k,
                   const float* a,
                   int64_t lda,
                   const float* b,
                   int64_t ldb,
                   float beta,
                   float* c,
                   int64_t ldc);

// In bf16 math, rounds the f32 matrix [rows, cols] at x (row stride ld) once, for every GEMM
// that reads it while the scope lives: an operand two GEMMs share (a gradient read by the input
// and the weight gradient GEMMs) is rounded once. x must not change while the scope lives. A
// no-op in f32 math.
class Bf16OperandScope {
public:
    Bf16OperandScope(const float* x, int64_t rows, int64_t cols, int64_t ld);
    Bf16OperandScope(const Bf16OperandScope&) = delete;
    Bf16OperandScope& operator=(const Bf16OperandScope&) = delete;

private:
    std::shared_ptr<const void> token_;  // the copy lives while this does
};

// A thread-local buffer of at least n floats, reused by every call on the thread: it grows to
// the largest request and never shrinks, so a steady batch shape allocates nothing. Valid until
// the next call on the same thread; CPU kernels do not nest, so each kernel takes one region
// and partitions it.
float* scratch_floats(size_t n);

// The oneDNN library's version ("2.6.3") and the kernel its bf16 matmul runs on this CPU
// (e.g. "brg:avx512_core_amx_bf16" with AMX, "brg:avx512_core_bf16" with AVX512-BF16; empty
// where it has none).
std::string onednn_version();
std::string bf16_gemm_kernel();
// Whether oneDNN has a bf16 matmul on this CPU (bf16_gemm_kernel() not empty); without one, bf16
// GEMMs run as OpenBLAS sgemm on the bf16-rounded operands.
bool onednn_bf16_available();
// The median time of oneDNN's own bf16 matmul [m, k] x [k, n] -> f32, operands already bf16 and
// the weights in its preferred blocked layout: the ceiling of the bf16 GEMMs.
double onednn_bf16_matmul_time_us(int64_t m, int64_t n, int64_t k, int reps);

}  // namespace shardrec::kernels::cpu
