// Element-wise ops on CUDA: one thread per element.
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

}  // namespace

void add_(Tensor& a, const Tensor& b, Stream& stream) {
    const int64_t n = a.numel();
    if (n == 0)
        return;
    const cudaStream_t s = cuda_stream(stream);
    add_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(n, a.data<float>(), b.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
