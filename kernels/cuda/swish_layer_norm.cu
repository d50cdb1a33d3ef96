// SwishLayerNorm on CUDA: a block per row. Forward: two-pass statistics (mean, then centred
// squares) as fixed-order block sums, then y. Backward: per row, grad_xhat sums as block sums and
// grad_x; the per-element gamma/beta terms go to scratch rows whose column sums (fixed order)
// give grad_gamma and grad_beta. Letters: R rows, N features.
#include "kernels/cuda/common.cuh"
#include "kernels/swish_layer_norm.h"

namespace shardrec::kernels::cuda {
namespace {

__global__ void swish_layer_norm_forward_kernel(int64_t n,
                                                const float* x,
                                                const float* gamma,
                                                const float* beta,
                                                float eps,
                                                float* y,
                                                float* mean,
                                                float* rstd) {
    __shared__ float scratch[kWarpSize];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * n;  // x[row, :], N floats
    float sum = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        sum += xr[i];
    }
    const float mu = block_sum(sum, scratch) / static_cast<float>(n);
    float sq = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        sq += (xr[i] - mu) * (xr[i] - mu);
    }
    const float rs = 1.f / sqrtf(block_sum(sq, scratch) / static_cast<float>(n) + eps);
    if (threadIdx.x == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float z = gamma[i] * ((xr[i] - mu) * rs) + beta[i];
        y[row * n + i] = xr[i] / (1.f + expf(-z));
    }
}

// grad_x of one row, and the row's terms of grad_gamma (gz * xhat) and grad_beta (gz).
__global__ void swish_layer_norm_backward_kernel(int64_t n,
                                                 const float* x,
                                                 const float* gamma,
                                                 const float* beta,
                                                 const float* mean,
                                                 const float* rstd,
                                                 const float* grad_y,
                                                 float* grad_x,
                                                 float* gamma_terms,
                                                 float* beta_terms) {
    __shared__ float scratch[kWarpSize];
    const int64_t row = blockIdx.x;
    const float mu = mean[row], rs = rstd[row];
    const float* xr = x + row * n;
    const float* gyr = grad_y + row * n;
    float sum_gh = 0.f, sum_gh_xhat = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float xhat = (xr[i] - mu) * rs;
        const float s = 1.f / (1.f + expf(-(gamma[i] * xhat + beta[i])));
        const float gz = gyr[i] * xr[i] * s * (1.f - s);
        gamma_terms[row * n + i] = gz * xhat;
        beta_terms[row * n + i] = gz;
        const float gh = gz * gamma[i];
        sum_gh += gh;
        sum_gh_xhat += gh * xhat;
    }
    const float inv_n = 1.f / static_cast<float>(n);
    const float m1 = block_sum(sum_gh, scratch) * inv_n;
    const float m2 = block_sum(sum_gh_xhat, scratch) * inv_n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float xhat = (xr[i] - mu) * rs;
        const float s = 1.f / (1.f + expf(-(gamma[i] * xhat + beta[i])));
        const float gh = beta_terms[row * n + i] * gamma[i];
        grad_x[row * n + i] = gyr[i] * s + rs * (gh - m1 - xhat * m2);
    }
}

}  // namespace

void swish_layer_norm_forward(const Tensor& x,
                              const Tensor& gamma,
                              const Tensor& beta,
                              float eps,
                              Tensor& y,
                              Tensor& mean,
                              Tensor& rstd,
                              Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    swish_layer_norm_forward_kernel<<<static_cast<unsigned>(x.size(0)), kBlockSize, 0, s>>>(
        x.size(1), x.data<float>(), gamma.data<float>(), beta.data<float>(), eps, y.data<float>(),
        mean.data<float>(), rstd.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

void swish_layer_norm_backward(const Tensor& x,
                               const Tensor& gamma,
                               const Tensor& beta,
                               const Tensor& mean,
                               const Tensor& rstd,
                               const Tensor& grad_y,
                               Tensor& grad_x,
                               Tensor& grad_gamma,
                               Tensor& grad_beta,
                               Stream& stream) {
    const int64_t rows = x.size(0), n = x.size(1);
    const cudaStream_t s = cuda_stream(stream);
    DeviceScratch terms(stream, static_cast<size_t>(2 * rows * n) * sizeof(float));
    float* gamma_terms = terms.as<float>();
    float* beta_terms = terms.as<float>(static_cast<size_t>(rows * n));
    swish_layer_norm_backward_kernel<<<static_cast<unsigned>(rows), kBlockSize, 0, s>>>(
        n, x.data<float>(), gamma.data<float>(), beta.data<float>(), mean.data<float>(),
        rstd.data<float>(), grad_y.data<float>(), grad_x.data<float>(), gamma_terms, beta_terms);
    SR_CUDA_LAUNCH_CHECK(s);
    column_sums(stream, gamma_terms, rows, n, grad_gamma.data<float>());
    column_sums(stream, beta_terms, rows, n, grad_beta.data<float>());
}

}  // namespace shardrec::kernels::cuda
