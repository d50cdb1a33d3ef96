// DLRM dot interaction on CUDA: a block per batch row. The row's F+1 vectors (and, backward, its
// P pair gradients) are staged in shared memory; forward forms each pair's dot over D in index
// order, backward sums each gradient element over partners in ascending order, as the CPU
// backend does. Letters: B batch, F embeddings, D dim, P pairs.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/dot_interaction.h"

namespace shardrec::kernels::cuda {
namespace {

// T_k of the staged row: k = 0 the dense vector, k >= 1 the k-th embedding.
__device__ __forceinline__ void stage_row(
    const float* dense_b, const float* sparse_b, int64_t num_vectors, int64_t dim, float* t) {
    for (int64_t i = threadIdx.x; i < num_vectors * dim; i += blockDim.x) {
        t[i] = i < dim ? dense_b[i] : sparse_b[i - dim];
    }
}

// Pair p of the strictly lower triangle in row-major order: p = i(i-1)/2 + j, j < i.
__device__ __forceinline__ void pair_of(int64_t p, int64_t* i, int64_t* j) {
    int64_t r = static_cast<int64_t>((1.0 + sqrt(1.0 + 8.0 * static_cast<double>(p))) / 2.0);
    while (r * (r - 1) / 2 > p) {
        --r;
    }
    while ((r + 1) * r / 2 <= p) {
        ++r;
    }
    *i = r;
    *j = p - r * (r - 1) / 2;
}

__global__ void dot_interaction_forward_kernel(
    int64_t num_features, int64_t dim, const float* dense, const float* sparse, float* out) {
    extern __shared__ float t[];  // [F + 1, D]
    const int64_t b = blockIdx.x;
    const int64_t num_vectors = num_features + 1;
    const int64_t pairs = num_vectors * num_features / 2;
    const int64_t width = dim + pairs;
    stage_row(dense + b * dim, sparse + b * num_features * dim, num_vectors, dim, t);
    __syncthreads();
    float* out_b = out + b * width;  // out[b, :]
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
        out_b[d] = t[d];
    }
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
        int64_t i, j;
        pair_of(p, &i, &j);
        const float* ti = t + i * dim;
        const float* tj = t + j * dim;
        float dot = 0.f;
        for (int64_t d = 0; d < dim; ++d) {
            dot += ti[d] * tj[d];
        }
        out_b[dim + p] = dot;
    }
}

__global__ void dot_interaction_backward_kernel(int64_t num_features,
                                                int64_t dim,
                                                const float* dense,
                                                const float* sparse,
                                                const float* grad_out,
                                                float* grad_dense,
                                                float* grad_sparse) {
    extern __shared__ float t[];  // [F + 1, D], then the row's P pair gradients
    const int64_t b = blockIdx.x;
    const int64_t num_vectors = num_features + 1;
    const int64_t pairs = num_vectors * num_features / 2;
    const int64_t width = dim + pairs;
    float* gpairs = t + num_vectors * dim;
    stage_row(dense + b * dim, sparse + b * num_features * dim, num_vectors, dim, t);
    const float* gout_b = grad_out + b * width;  // grad_out[b, :]
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
        gpairs[p] = gout_b[dim + p];
    }
    __syncthreads();
    // grad T_i[d] = [i == 0] grad_out[b, d] + sum_{j != i} g(max(i,j), min(i,j)) T_j[d]
    for (int64_t e = threadIdx.x; e < num_vectors * dim; e += blockDim.x) {
        const int64_t i = e / dim;
        const int64_t d = e % dim;
        float g = i == 0 ? gout_b[d] : 0.f;
        for (int64_t j = 0; j < num_vectors; ++j) {
            if (j != i) {
                const int64_t p = i > j ? i * (i - 1) / 2 + j : j * (j - 1) / 2 + i;
                g += gpairs[p] * t[j * dim + d];
            }
        }
        if (i == 0) {
            grad_dense[b * dim + d] = g;
        } else {
            grad_sparse[b * num_features * dim + (i - 1) * dim + d] = g;
        }
    }
}

// Dynamic shared memory of `bytes` for `kernel`, opting in above the 48 KiB default.
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, int device) {
    int max_bytes = 0;
    SR_CUDA_CHECK(
        cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    SR_CHECK(bytes <= static_cast<size_t>(max_bytes),
             "dot interaction on cuda:{}: a row needs {} bytes of shared memory, the device has {} "
             "(too many features or too large a dim)",
             device, bytes, max_bytes);
    if (bytes > 48 * 1024) {
        SR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
    }
}

}  // namespace

void dot_interaction_forward(const Tensor& dense,
                             const Tensor& sparse,
                             Tensor& out,
                             Stream& stream) {
    const int64_t batch = dense.size(0), dim = dense.size(1);
    const int64_t num_features = sparse.size(1) / dim;
    const size_t shared = static_cast<size_t>((num_features + 1) * dim) * sizeof(float);
    allow_shared(dot_interaction_forward_kernel, shared, dense.device().index);
    const cudaStream_t s = cuda_stream(stream);
    dot_interaction_forward_kernel<<<static_cast<unsigned>(batch), kBlockSize, shared, s>>>(
        num_features, dim, dense.data<float>(), sparse.data<float>(), out.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

void dot_interaction_backward(const Tensor& dense,
                              const Tensor& sparse,
                              const Tensor& grad_out,
                              Tensor& grad_dense,
                              Tensor& grad_sparse,
                              Stream& stream) {
    const int64_t batch = dense.size(0), dim = dense.size(1);
    const int64_t num_features = sparse.size(1) / dim;
    const int64_t pairs = (num_features + 1) * num_features / 2;
    const size_t shared = static_cast<size_t>((num_features + 1) * dim + pairs) * sizeof(float);
    allow_shared(dot_interaction_backward_kernel, shared, dense.device().index);
    const cudaStream_t s = cuda_stream(stream);
    dot_interaction_backward_kernel<<<static_cast<unsigned>(batch), kBlockSize, shared, s>>>(
        num_features, dim, dense.data<float>(), sparse.data<float>(), grad_out.data<float>(),
        grad_dense.data<float>(), grad_sparse.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
