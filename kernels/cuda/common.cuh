// Helpers every CUDA kernel file shares (STYLE.md R1: in one place, not per file): the stream of
// a Stream, launch sizes, storage <-> fp32 conversions of the engine's Half/BFloat16, fixed-order
// (deterministic) warp and block sums, stream-ordered scratch memory, and the row-major cuBLAS
// GEMM every dense op uses. Only kernels/cuda/*.cu include this header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <memory>

#include "engine/core/cuda/cuda_check.h"
#include "engine/core/dtype.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "kernels/cuda/cublas_api.cuh"
#include "kernels/linear.h"

namespace shardrec::kernels::cuda {

constexpr int kWarpSize = 32;
constexpr int kBlockSize = 256;

inline cudaStream_t cuda_stream(Stream& stream) {
    SR_DCHECK(stream.device().is_cuda(), "a CUDA kernel needs a CUDA stream, got {}",
              stream.device().str());
    return static_cast<cudaStream_t>(stream.handle());
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// Blocks of kBlockSize threads covering n threads (at least one block).
inline unsigned blocks_for(int64_t n, int threads = kBlockSize) {
    const int64_t b = ceil_div(n, threads);
    SR_CHECK(b < (int64_t{1} << 31), "launch of {} threads is too large", n);
    return static_cast<unsigned>(b > 0 ? b : 1);
}

inline bool is_aligned(const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// ---- storage conversions (bit-exact with engine/core/dtype.h: round to nearest even) ----

__device__ __forceinline__ float to_f32(float x) {
    return x;
}

__device__ __forceinline__ float to_f32(Half x) {
    return __half2float(__ushort_as_half(x.bits));
}

__device__ __forceinline__ float to_f32(BFloat16 x) {
    return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);

template <>
__device__ __forceinline__ float from_f32<float>(float x) {
    return x;
}

template <>
__device__ __forceinline__ Half from_f32<Half>(float x) {
    return Half{__half_as_ushort(__float2half_rn(x))};
}

template <>
__device__ __forceinline__ BFloat16 from_f32<BFloat16>(float x) {
    return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
}

// ---- fixed-order reductions: the same inputs always give the same bits ----

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 floats. Ends with a barrier, so it can be called again right away.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    v = warp_sum(v);
    if (lane == 0) {
        shared[warp] = v;
    }
    __syncthreads();
    const int num_warps = blockDim.x / kWarpSize;
    float total = lane < num_warps ? shared[lane] : 0.f;
    total = warp_sum(total);
    __syncthreads();
    return total;
}

__device__ __forceinline__ float sigmoid_f32(float z) {
    return 1.f / (1.f + expf(-z));
}

__device__ __forceinline__ float apply_activation(Activation act, float z) {
    switch (act) {
        case Activation::kRelu:
            return z > 0.f ? z : 0.f;
        case Activation::kSigmoid:
            return sigmoid_f32(z);
        case Activation::kIdentity:
            break;
    }
    return z;
}

// act'(z) from y = act(z), as kernels/linear.h documents.
__device__ __forceinline__ float activation_grad_from_output(Activation act, float y) {
    switch (act) {
        case Activation::kRelu:
            return y > 0.f ? 1.f : 0.f;
        case Activation::kSigmoid:
            return y * (1.f - y);
        case Activation::kIdentity:
            break;
    }
    return 1.f;
}

// ---- scratch memory ----

// Temporary device memory ordered on one stream: allocated from the device's stream-ordered pool
// and given back on the same stream when the object dies, so it stays valid for every kernel
// enqueued before that. The pool keeps freed memory (release threshold raised once per device),
// so a steady shape allocates nothing from the driver.
class DeviceScratch {
public:
    DeviceScratch(Stream& stream, size_t bytes);
    ~DeviceScratch();
    DeviceScratch(const DeviceScratch&) = delete;
    DeviceScratch& operator=(const DeviceScratch&) = delete;

    void* data() const { return ptr_; }

    template <typename T>
    T* as(size_t element_offset = 0) const {
        return static_cast<T*>(ptr_) + element_offset;
    }

private:
    cudaStream_t stream_;
    void* ptr_ = nullptr;
};

// ---- GEMM ----

enum class Trans { kNo, kYes };

// The cuBLAS (and cuBLASLt) compute type of a GEMM on fp32 operands: fp32, or TF32 tensor cores
// in tf32 math. bf16 math never multiplies fp32 operands (Bf16Operand below). A GEMM reads
// gemm_math() once and decides everything from that value.
cublasComputeType_t gemm_compute_type(GemmMath math);

// bf16 math: a bf16 copy of the stored fp32 [rows, cols] matrix at x (row stride ld), or of
// `batch` such matrices `stride` floats apart, each value rounded to nearest even (the CPU's
// float_to_bf16), in scratch ordered on `stream`. Its row stride is cols rounded up to 8 (16-byte
// rows, as cuBLAS's tensor-core kernels want) and matrix i starts at i * this->stride. cuBLAS
// picks TF32 kernels for fp32 operands even under CUBLAS_COMPUTE_32F_FAST_16BF (measured,
// bench/results/gpu-20261123d), so bf16 math rounds its operands itself: one pass that reads 4
// and writes 2 bytes a value, against a GEMM at twice the TF32 rate.
struct Bf16Operand {
    Bf16Operand(Stream& stream,
                const float* x,
                int64_t rows,
                int64_t cols,
                int64_t ld,
                int64_t batch = 1,
                int64_t stride = 0);

    const __nv_bfloat16* data() const { return mem.as<__nv_bfloat16>(); }

    int64_t ld;
    int64_t stride;
    DeviceScratch mem;
};

// bf16 math: an operand that several GEMMs of one kernel read, rounded once for all of them.
// While the scope lives, sgemm on the same stream reads its copy for an operand at exactly x
// with the same rows, cols and ld. Nothing in other maths. Scopes are per thread.
class Bf16OperandScope {
public:
    Bf16OperandScope(Stream& stream, const float* x, int64_t rows, int64_t cols, int64_t ld);
    ~Bf16OperandScope();
    Bf16OperandScope(const Bf16OperandScope&) = delete;
    Bf16OperandScope& operator=(const Bf16OperandScope&) = delete;

    // The live copy of that operand on that stream, or nullptr.
    static const Bf16Operand* find(
        cudaStream_t stream, const float* x, int64_t rows, int64_t cols, int64_t ld);

private:
    cudaStream_t stream_ = nullptr;
    const float* x_ = nullptr;
    int64_t rows_ = 0, cols_ = 0, ld_ = 0;
    std::unique_ptr<Bf16Operand> copy_;
};

// Row-major C[m, n] = alpha op(A) op(B) + beta C on bf16 operands, fp32 accumulation and C (one
// cuBLAS call, CUBLAS_COMPUTE_32F), `batch` matrices stride_a/b/c elements apart.
void gemm_bf16(Stream& stream,
               Trans ta,
               Trans tb,
               int64_t m,
               int64_t n,
               int64_t k,
               const __nv_bfloat16* a,
               int64_t lda,
               int64_t stride_a,
               const __nv_bfloat16* b,
               int64_t ldb,
               int64_t stride_b,
               float beta,
               float* c,
               int64_t ldc,
               int64_t stride_c,
               int64_t batch,
               float alpha = 1.f);

// Row-major C[m, n] = alpha op(A) op(B) + beta C on `stream`, as kernels/cpu/linear.h's sgemm:
// lda/ldb/ldc are the row strides of the stored matrices. One cuBLAS call in the math mode of
// gemm_math(): fp32 by default, TF32 tensor cores on the fp32 operands in tf32, and in bf16 the
// operands rounded to bf16 first (Bf16Operand) and multiplied by bf16 tensor cores.
void sgemm(Stream& stream,
           Trans ta,
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
           int64_t ldc,
           float alpha = 1.f);

// Batched form: matrix i of A, B and C starts stride_a/b/c floats after matrix i - 1.
void sgemm_strided_batched(Stream& stream,
                           Trans ta,
                           Trans tb,
                           int64_t m,
                           int64_t n,
                           int64_t k,
                           const float* a,
                           int64_t lda,
                           int64_t stride_a,
                           const float* b,
                           int64_t ldb,
                           int64_t stride_b,
                           float beta,
                           float* c,
                           int64_t ldc,
                           int64_t stride_c,
                           int64_t batch);

// dst[r, c] = src[r, c] for a [rows, cols] block between row strides (a strided device copy).
void copy_rows(Stream& stream,
               float* dst,
               int64_t dst_ld,
               const float* src,
               int64_t src_ld,
               int64_t rows,
               int64_t cols);

// out[c] = sum_r x[r, c] of a row-major [rows, cols] matrix, written. Rows are summed in a fixed
// order (blocks of kColumnSumRows rows, then the block partials in order), so the result is
// deterministic. A kernel that makes x can sum its blocks itself and pass their partials.
constexpr int64_t kColumnSumRows = 64;
void column_sums(Stream& stream, const float* x, int64_t rows, int64_t cols, float* out);

}  // namespace shardrec::kernels::cuda
