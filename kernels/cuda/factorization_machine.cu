// FactorizationMachine on CUDA: a block per row; the row's sum and sum of squares are block sums
// in a fixed order (deterministic). Letters: B batch, N flattened fields.
#include "kernels/cuda/common.cuh"
#include "kernels/factorization_machine.h"

namespace shardrec::kernels::cuda {
namespace {

__global__ void factorization_machine_forward_kernel(int64_t n, const float* x, float* out) {
    __shared__ float scratch[kWarpSize];
    const float* xb = x + blockIdx.x * n;  // x[b, :], N floats
    float sum = 0.f, sum_sq = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        sum += xb[i];
        sum_sq += xb[i] * xb[i];
    }
    sum = block_sum(sum, scratch);
    sum_sq = block_sum(sum_sq, scratch);
    if (threadIdx.x == 0) {
        out[blockIdx.x] = 0.5f * (sum * sum - sum_sq);
    }
}

__global__ void factorization_machine_backward_kernel(int64_t n,
                                                      const float* x,
                                                      const float* grad_out,
                                                      float* grad_x) {
    __shared__ float scratch[kWarpSize];
    const float* xb = x + blockIdx.x * n;
    float sum = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        sum += xb[i];
    }
    sum = block_sum(sum, scratch);
    const float g = grad_out[blockIdx.x];
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        grad_x[blockIdx.x * n + i] = g * (sum - xb[i]);
    }
}

}  // namespace

void factorization_machine_forward(const Tensor& x, Tensor& out, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    factorization_machine_forward_kernel<<<static_cast<unsigned>(x.size(0)), kBlockSize, 0, s>>>(
        x.size(1), x.data<float>(), out.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

void factorization_machine_backward(const Tensor& x,
                                    const Tensor& grad_out,
                                    Tensor& grad_x,
                                    Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    factorization_machine_backward_kernel<<<static_cast<unsigned>(x.size(0)), kBlockSize, 0, s>>>(
        x.size(1), x.data<float>(), grad_out.data<float>(), grad_x.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
