// Dense optimizer updates on CUDA: one thread per element, the same f32 expressions as the CPU
// backend (Adam's bias corrections computed once per call in double on the host).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/dense_optimizer.h"
#include "kernels/optimizer_rules.h"

namespace shardrec::kernels::cuda {
namespace {

__global__ void sgd_update_kernel(int64_t n, float* p, const float* g, float lr, float wd) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        p[i] = rules::sgd(p[i], rules::weight_decay(g[i], p[i], wd), lr);
    }
}

__global__ void adagrad_update_kernel(
    int64_t n, float* p, const float* g, float* s, float lr, float eps, float wd) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        const float gi = rules::weight_decay(g[i], p[i], wd);
        float sum = s[i];
        p[i] = rules::adagrad(p[i], gi, sum, lr, eps);
        s[i] = sum;
    }
}

struct AdamConstants {
    float beta1, beta2, eps, weight_decay, step_size, bc2_sqrt;
};

__global__ void adam_update_kernel(
    int64_t n, float* p, const float* g, float* m, float* v, AdamConstants k) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        const float gi = rules::weight_decay(g[i], p[i], k.weight_decay);
        float mi = m[i], vi = v[i];
        rules::adam_moments(gi, k.beta1, k.beta2, mi, vi);
        m[i] = mi;
        v[i] = vi;
        p[i] = rules::adam_torch(p[i], mi, vi, k.step_size, k.bc2_sqrt, k.eps);
    }
}

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, float lr, float weight_decay, Stream& stream) {
    const int64_t n = param.numel();
    const cudaStream_t s = cuda_stream(stream);
    sgd_update_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(n, param.data<float>(),
                                                           grad.data<float>(), lr, weight_decay);
    SR_CUDA_LAUNCH_CHECK(s);
}

void adagrad_update(Tensor& param,
                    const Tensor& grad,
                    Tensor& state_sum,
                    float lr,
                    float eps,
                    float weight_decay,
                    Stream& stream) {
    const int64_t n = param.numel();
    const cudaStream_t s = cuda_stream(stream);
    adagrad_update_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(
        n, param.data<float>(), grad.data<float>(), state_sum.data<float>(), lr, eps, weight_decay);
    SR_CUDA_LAUNCH_CHECK(s);
}

void adam_update(Tensor& param,
                 const Tensor& grad,
                 Tensor& exp_avg,
                 Tensor& exp_avg_sq,
                 const AdamHyperParams& hp,
                 Stream& stream) {
    const int64_t n = param.numel();
    const AdamConstants k{
        hp.beta1,
        hp.beta2,
        hp.eps,
        hp.weight_decay,
        static_cast<float>(hp.lr / rules::adam_bias_correction(hp.beta1, hp.step)),
        static_cast<float>(std::sqrt(rules::adam_bias_correction(hp.beta2, hp.step)))};
    const cudaStream_t s = cuda_stream(stream);
    adam_update_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(
        n, param.data<float>(), grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(),
        k);
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
