// BCE-with-logits on CUDA: one block; each thread handles a strided set of rows, the per-thread
// sums (in double, as the CPU's running sum) are combined in a fixed tree, so the loss is
// deterministic. The gradient is elementwise. Letters: B batch.
#include "kernels/bce_with_logits.h"
#include "kernels/cuda/common.cuh"

namespace shardrec::kernels::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void bce_with_logits_kernel(
    int64_t batch, const float* logits, const float* labels, float* loss, float* grad) {
    __shared__ double partial[kThreads];
    const float inv_b = 1.f / static_cast<float>(batch);
    double total = 0.0;
    for (int64_t b = threadIdx.x; b < batch; b += kThreads) {
        const float x = logits[b], y = labels[b];
        const float t = expf(-fabsf(x));  // in (0, 1]: never overflows
        total += static_cast<double>(fmaxf(x, 0.f) - x * y + log1pf(t));
        const float sig = x >= 0.f ? 1.f / (1.f + t) : t / (1.f + t);
        grad[b] = (sig - y) * inv_b;
    }
    partial[threadIdx.x] = total;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            partial[threadIdx.x] += partial[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        loss[0] = static_cast<float>(partial[0] / static_cast<double>(batch));
    }
}

}  // namespace

void bce_with_logits(
    const Tensor& logits, const Tensor& labels, Tensor& loss, Tensor& grad_logits, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    bce_with_logits_kernel<<<1, kThreads, 0, s>>>(logits.numel(), logits.data<float>(),
                                                  labels.data<float>(), loss.data<float>(),
                                                  grad_logits.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
