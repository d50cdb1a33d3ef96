// Element-wise ops on CUDA: one thread per element (columns_axpy: per element of the block;
// fill_rows: of the listed rows).
#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace shardrec::kernels::cuda {
namespace {

__global__ void add_kernel(int64_t n, float* a, const float* b) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        a[i] += b[i];
    }
}

__global__ void fill_kernel(int64_t n, float* a, float value) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        a[i] = value;
    }
}

__global__ void fill_rows_kernel(FillRows p) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= p.n * p.width)
        return;
    const int64_t k = i / p.width, c = i - k * p.width;
    const int64_t r = p.which[k];
    if (r >= 0 && r < p.rows) {
        p.a[r * p.width + c] = p.value;
    }
}

// d and s: the rows' blocks; the same arithmetic, in the same order, as the CPU definition.
__global__ void columns_axpy_kernel(ColumnsAxpy p) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= p.rows * p.n)
        return;
    const int64_t b = i / p.n, j = i - b * p.n;
    const float s = p.row_divisor != nullptr ? __fmul_rn(p.divisor, p.row_divisor[b]) : p.divisor;
    float* d = p.dst + b * p.dst_stride + j;
    const float x = p.src[b * p.src_stride + j];
    const float v = p.reciprocal ? __fmul_rn(x, __fdiv_rn(1.0f, s)) : __fdiv_rn(x, s);
    *d = p.accumulate ? __fadd_rn(*d, v) : v;
}

}  // namespace

void add_(Tensor& a, const Tensor& b, Stream& stream) {
    const int64_t n = a.numel();
    if (n == 0)
        return;
    const cudaStream_t s = cuda_stream(stream);
    add_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(n, a.data<float>(), b.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

void fill_(Tensor& a, float value, Stream& stream) {
    const int64_t n = a.numel();
    if (n == 0)
        return;
    const cudaStream_t s = cuda_stream(stream);
    fill_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(n, a.data<float>(), value);
    SR_CUDA_LAUNCH_CHECK(s);
}

void fill_rows(const FillRows& p, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    fill_rows_kernel<<<blocks_for(p.n * p.width), kBlockSize, 0, s>>>(p);
    SR_CUDA_LAUNCH_CHECK(s);
}

void columns_axpy(const ColumnsAxpy& p, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    columns_axpy_kernel<<<blocks_for(p.rows * p.n), kBlockSize, 0, s>>>(p);
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
