// Fully connected layer (TorchRec Perceptron = activation(nn.Linear)): GEMM with a fused bias +
// activation epilogue, and its backward. Letters: B batch rows, I input features, O outputs.
#pragma once

#include <memory>
#include <string>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

// The activations a GEMM epilogue fuses. Each derivative is computed from the activation's
// output y, so backward needs no pre-activation copy: relu' = [y > 0], sigmoid' = y (1 - y).
enum class Activation { kIdentity, kRelu, kSigmoid };

const char* activation_name(Activation act);               // "identity", "relu", "sigmoid"
Activation activation_from_name(const std::string& name);  // throws on anything else

// y = act(x w^T + bias).
//   x     [B, I]  f32, contiguous
//   w     [O, I]  f32 (PyTorch nn.Linear layout)
//   bias  [O]     f32 or nullptr (no bias)
//   y     [B, O]  f32, written; must not alias x, w or bias
// B, I, O >= 1. Bitwise repeatable for a fixed BLAS thread count (see set_blas_num_threads).
void linear_forward(const Tensor& x,
                    const Tensor& w,
                    const Tensor* bias,
                    Activation act,
                    Tensor& y,
                    Stream& stream);

// Backward of linear_forward. With g = grad_y * act'(y) (elementwise, from the saved output y):
//   grad_x = g w      [B, I]  (skipped when grad_x is nullptr, e.g. the first layer's input)
//   grad_w = g^T x    [O, I]  written, not accumulated
//   grad_b = sum_b g  [O]     written; nullptr when the layer has no bias
// y and grad_y are [B, O]. The CPU backend keeps a thread-local scratch of B*O floats for g
// (grows to the largest shape seen, never shrinks), so a steady batch shape allocates nothing.
// grad_b is summed over rows in row order, so it does not depend on thread count.
void linear_backward(const Tensor& x,
                     const Tensor& w,
                     const Tensor& y,
                     const Tensor& grad_y,
                     Activation act,
                     Tensor* grad_x,
                     Tensor& grad_w,
                     Tensor* grad_b,
                     Stream& stream);

// Math of the GEMMs (linear and the cross nets): fp32 by default; TF32 or bf16 tensor cores
// trade precision for speed. Process-wide. tf32 (CUDA only): cuBLAS's 32F_FAST_TF32 on the fp32
// operands. bf16: each operand rounded to bf16 (nearest even), products accumulated in fp32,
// fp32 out; CUDA rounds into scratch and runs cuBLAS on bf16 operands, the CPU runs oneDNN's
// matmul on bf16 operands: the same math on both.
enum class GemmMath { kF32, kTf32, kBf16 };

const char* gemm_math_name(GemmMath math);              // "f32", "tf32", "bf16"
GemmMath gemm_math_from_name(const std::string& name);  // throws on anything else
void set_gemm_math(GemmMath math);  // also drops the weights' bf16 copies (below)
GemmMath gemm_math();

// Scoring (predict, serve, eval) turns this on: the CPU's f32 GEMMs over the rows of A (op(A) = A,
// as every forward's x W^T) compute each element of C as one FMA chain over k in order
// (kernels/cpu/gemm_ordered.cpp), so a row's bits depend on that row alone, not on the rows beside
// it, the thread count or the CPU's vector width: a sample's score is the same from a whole or a
// partial batch, any world size, eval, predict or a dynamic batch of serve. (OpenBLAS's kernels
// for some CPUs, AVX2's Haswell and Zen, round a row by its place in the call and by the threads'
// shares.) Training's steps keep OpenBLAS; its evaluations use this mode too (the metrics eval
// reproduces). Process-wide; off by default.
void set_row_invariant_gemms(bool on);
bool row_invariant_gemms();

// The mode on while it lives (a training run's evaluations: the metrics that eval and predict
// reproduce), as it was after.
class RowInvariantGemmsScope {
public:
    RowInvariantGemmsScope() : was_(row_invariant_gemms()) { set_row_invariant_gemms(true); }

    ~RowInvariantGemmsScope() { set_row_invariant_gemms(was_); }

    RowInvariantGemmsScope(const RowInvariantGemmsScope&) = delete;
    RowInvariantGemmsScope& operator=(const RowInvariantGemmsScope&) = delete;

private:
    bool was_;
};

// The CPU's bf16 GEMMs round each f32 operand to bf16 per call, except weights: a module calls
// refresh_gemm_weight(w) for each of its weights at the start of its forward, which rounds w once
// into a copy that the GEMMs of that forward and of its backward read (weights change only in the
// optimizer step, after the backward, so the copy is once per step, not per GEMM). Same bits as
// rounding per call. A no-op unless the math is bf16 and w is on the CPU.
void refresh_gemm_weight(const Tensor& w);
void drop_gemm_weight_copies();

// Likewise for an activation: a module keeps a copy of its input x (2-D, f32) from its forward
// to its backward, which the GEMMs of both read, so x is rounded once a step instead of once a
// GEMM (same bits). The copy is found while this handle lives and x's storage does (a freed
// buffer reused by another tensor never finds it). x must not change while the handle lives.
// Empty (nothing kept) unless the math is bf16 and x is on the CPU.
class Bf16ActivationCopy {
public:
    Bf16ActivationCopy() = default;
    explicit Bf16ActivationCopy(const Tensor& x);

private:
    std::shared_ptr<const void> token_;  // the copy lives while this does
};

// What the CPU GEMMs run on in each math, found at run time, e.g. "f32: OpenBLAS sgemm; bf16:
// oneDNN 2.6.3 brg:avx512_core_amx_bf16 (AMX)" or "... brg:avx512_core_bf16 (AVX512-BF16, no
// AMX)": oneDNN picks the best kernel this CPU has. For --version and the benchmarks.
std::string cpu_gemm_backends();

// Which build of the CPU's elementwise loops runs (kernels/cpu/avx512_clones.h): "AVX-512
// (avx512f)" or "baseline x86-64 (no AVX-512)", chosen from the CPU's features. For --version and
// the benchmarks.
std::string cpu_loop_build();

// Threads OpenBLAS uses for every GEMM of the process, set once from one place (the trainer at
// startup). OpenBLAS sgemm is bitwise repeatable for a fixed thread count but NOT across counts:
// measured with OpenBLAS 0.3.21 (Zen), 1 and 2 threads differ in the last bit on 3-7% of the
// elements, so every run that must reproduce another uses the same count. The other dense CPU
// kernels are independent of their (OpenMP) thread count.
void set_blas_num_threads(int num_threads);
int blas_num_threads();

// How the loaded OpenBLAS runs its threads: "OpenMP" (the build CMakeLists.txt links: its GEMMs on
// the process's OpenMP threads), "pthreads" (its own pool beside OpenMP's) or "sequential".
const char* blas_threading();

namespace cpu {
void linear_forward(
    const Tensor& x, const Tensor& w, const Tensor* bias, Activation act, Tensor& y);
void linear_backward(const Tensor& x,
                     const Tensor& w,
                     const Tensor& y,
                     const Tensor& grad_y,
                     Activation act,
                     Tensor* grad_x,
                     Tensor& grad_w,
                     Tensor* grad_b);
}  // namespace cpu

namespace cuda {
void linear_forward(const Tensor& x,
                    const Tensor& w,
                    const Tensor* bias,
                    Activation act,
                    Tensor& y,
                    Stream& stream);
void linear_backward(const Tensor& x,
                     const Tensor& w,
                     const Tensor& y,
                     const Tensor& grad_y,
                     Activation act,
                     Tensor* grad_x,
                     Tensor& grad_w,
                     Tensor* grad_b,
                     Stream& stream);

// cuBLAS and cuBLASLt load at the first GEMM on a GPU (kernels/cuda/cublas_api.cuh), so a CPU
// rank of a CUDA build never maps them. cublas_loaded: whether this process has; load_cublas loads
// them now and returns the number of entry points resolved (an Error naming what is missing, or
// "no CUDA definition in this build").
bool cublas_loaded();
int load_cublas();
}  // namespace cuda

}  // namespace shardrec::kernels
