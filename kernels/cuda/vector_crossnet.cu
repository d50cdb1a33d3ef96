// Vector cross layer on CUDA: a block per row for the dots (fixed-order block sums) and the
// fused elementwise output; backward writes the per-row terms of grad_w to scratch and takes
// grad_w and grad_b as fixed-order column sums. Letters: B batch, N features.
#include "kernels/cuda/common.cuh"
#include "kernels/vector_crossnet.h"

namespace shardrec::kernels::cuda {
namespace {

__global__ void vector_crossnet_forward_kernel(int64_t n,
                                               const float* x0,
                                               const float* xl,
                                               const float* w,
                                               const float* bias,
                                               float* out,
                                               float* s) {
    __shared__ float scratch[kWarpSize];
    const int64_t row = blockIdx.x * n;  // row b of every [B, N] tensor
    float dot = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        dot += xl[row + i] * w[i];
    }
    dot = block_sum(dot, scratch);
    if (threadIdx.x == 0) {
        s[blockIdx.x] = dot;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        out[row + i] = x0[row + i] * dot + bias[i] + xl[row + i];
    }
}

// gs_b = grad_out_b . x0_b; grad_x0 += g s_b; grad_xl = g + gs_b w (one tensor when aliased);
// w_terms[b, :] = gs_b xl_b.
__global__ void vector_crossnet_backward_kernel(int64_t n,
                                                const float* x0,
                                                const float* xl,
                                                const float* w,
                                                const float* s,
                                                const float* grad_out,
                                                float* grad_x0,
                                                float* grad_xl,
                                                float* w_terms) {
    __shared__ float scratch[kWarpSize];
    const int64_t row = blockIdx.x * n;
    float gs = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        gs += grad_out[row + i] * x0[row + i];
    }
    gs = block_sum(gs, scratch);
    const float sb = s[blockIdx.x];
    const bool aliased = grad_xl == grad_x0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float g = grad_out[row + i];
        const float gx0_new = grad_x0[row + i] + g * sb;
        const float gxl_new = g + gs * w[i];
        if (aliased) {
            grad_x0[row + i] = gx0_new + gxl_new;
        } else {
            grad_x0[row + i] = gx0_new;
            grad_xl[row + i] = gxl_new;
        }
        w_terms[row + i] = gs * xl[row + i];
    }
}

}  // namespace

void vector_crossnet_forward(const Tensor& x0,
                             const Tensor& xl,
                             const Tensor& w,
                             const Tensor& bias,
                             Tensor& out,
                             Tensor& s,
                             Stream& stream) {
    const cudaStream_t cs = cuda_stream(stream);
    vector_crossnet_forward_kernel<<<static_cast<unsigned>(x0.size(0)), kBlockSize, 0, cs>>>(
        x0.size(1), x0.data<float>(), xl.data<float>(), w.data<float>(), bias.data<float>(),
        out.data<float>(), s.data<float>());
    SR_CUDA_LAUNCH_CHECK(cs);
}

void vector_crossnet_backward(const Tensor& x0,
                              const Tensor& xl,
                              const Tensor& w,
                              const Tensor& s,
                              const Tensor& grad_out,
                              Tensor& grad_x0,
                              Tensor& grad_xl,
                              Tensor& grad_w,
                              Tensor& grad_b,
                              Stream& stream) {
    const int64_t batch = x0.size(0), n = x0.size(1);
    const cudaStream_t cs = cuda_stream(stream);
    DeviceScratch w_terms(stream, static_cast<size_t>(batch * n) * sizeof(float));
    vector_crossnet_backward_kernel<<<static_cast<unsigned>(batch), kBlockSize, 0, cs>>>(
        n, x0.data<float>(), xl.data<float>(), w.data<float>(), s.data<float>(),
        grad_out.data<float>(), grad_x0.data<float>(), grad_xl.data<float>(), w_terms.as<float>());
    SR_CUDA_LAUNCH_CHECK(cs);
    column_sums(stream, w_terms.as<float>(), batch, n, grad_w.data<float>());
    column_sums(stream, grad_out.data<float>(), batch, n, grad_b.data<float>());
}

}  // namespace shardrec::kernels::cuda
