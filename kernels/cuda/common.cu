// The host side of kernels/cuda/common.cuh: scratch memory from the stream-ordered pool, one
// cuBLAS handle per thread and device, row-major GEMMs, strided copies and column sums.
#include <climits>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/common.cuh"

namespace shardrec::kernels::cuda {
namespace {

// Keep freed pool memory instead of returning it to the driver at every synchronisation: a
// training step frees and re-allocates the same scratch sizes each time.
void keep_pool_memory(int device) {
    static std::mutex mutex;
    static std::unordered_map<int, bool> done;
    std::lock_guard<std::mutex> lock(mutex);
    if (done[device]) {
        return;
    }
    cudaMemPool_t pool;
    SR_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    SR_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    done[device] = true;
}

cublasHandle_t cublas_handle(Stream& stream) {
    SR_CUDA_CHECK(cudaSetDevice(stream.device().index));
    thread_local std::unordered_map<int, cublasHandle_t> handles;
    cublasHandle_t& h = handles[stream.device().index];
    if (h == nullptr) {
        SR_CUBLAS_CHECK(cublasCreate(&h));
    }
    SR_CUBLAS_CHECK(cublasSetStream(h, cuda_stream(stream)));
    return h;
}

int to_int(int64_t v) {
    SR_CHECK(v >= 0 && v <= INT_MAX, "GEMM size {} does not fit cuBLAS's int", v);
    return static_cast<int>(v);
}

cublasOperation_t op(Trans t) {
    return t == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// ---- kernels ----

__global__ void copy_rows_kernel(
    float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * cols) {
        return;
    }
    const int64_t r = i / cols;
    const int64_t c = i % cols;
    dst[r * dst_ld + c] = src[r * src_ld + c];
}

// partial[p, c] = sum of x[r, c] over rows [p * 64, (p + 1) * 64), in row order.
__global__ void column_partial_sums_kernel(const float* x,
                                           int64_t rows,
                                           int64_t cols,
                                           float* partial) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t p = blockIdx.y;
    if (c >= cols) {
        return;
    }
    const int64_t end = min(rows, (p + 1) * kColumnSumRows);
    float sum = 0.f;
    for (int64_t r = p * kColumnSumRows; r < end; ++r) {
        sum += x[r * cols + c];
    }
    partial[p * cols + c] = sum;
}

}  // namespace

cublasComputeType_t gemm_compute_type() {
    switch (gemm_math()) {
        case GemmMath::kTf32:
            return CUBLAS_COMPUTE_32F_FAST_TF32;
        case GemmMath::kBf16:
            return CUBLAS_COMPUTE_32F_FAST_16BF;
        case GemmMath::kF32:
            break;
    }
    return CUBLAS_COMPUTE_32F;
}

DeviceScratch::DeviceScratch(Stream& stream, size_t bytes) : stream_(cuda_stream(stream)) {
    keep_pool_memory(stream.device().index);
    if (bytes > 0) {
        SR_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream_));
    }
}

DeviceScratch::~DeviceScratch() {
    if (ptr_ != nullptr) {
        SR_CUDA_WARN(cudaFreeAsync(ptr_, stream_));
    }
}

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
           float alpha) {
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands and
    // m, n; a row-major matrix with row stride ld is its column-major transpose with that ld.
    SR_CUBLAS_CHECK(cublasGemmEx(cublas_handle(stream), op(tb), op(ta), to_int(n), to_int(m),
                                 to_int(k), &alpha, b, CUDA_R_32F, to_int(ldb), a, CUDA_R_32F,
                                 to_int(lda), &beta, c, CUDA_R_32F, to_int(ldc),
                                 gemm_compute_type(), CUBLAS_GEMM_DEFAULT));
}

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
                           int64_t batch) {
    const float alpha = 1.f;
    SR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        cublas_handle(stream), op(tb), op(ta), to_int(n), to_int(m), to_int(k), &alpha, b,
        CUDA_R_32F, to_int(ldb), stride_b, a, CUDA_R_32F, to_int(lda), stride_a, &beta, c,
        CUDA_R_32F, to_int(ldc), stride_c, to_int(batch), gemm_compute_type(),
        CUBLAS_GEMM_DEFAULT));
}

void copy_rows(Stream& stream,
               float* dst,
               int64_t dst_ld,
               const float* src,
               int64_t src_ld,
               int64_t rows,
               int64_t cols) {
    if (rows * cols == 0) {
        return;
    }
    const cudaStream_t s = cuda_stream(stream);
    copy_rows_kernel<<<blocks_for(rows * cols), kBlockSize, 0, s>>>(dst, dst_ld, src, src_ld, rows,
                                                                    cols);
    SR_CUDA_LAUNCH_CHECK(s);
}

void column_sums(Stream& stream, const float* x, int64_t rows, int64_t cols, float* out) {
    const cudaStream_t s = cuda_stream(stream);
    const int64_t num_partials = ceil_div(rows, kColumnSumRows);
    if (num_partials <= 1) {
        column_partial_sums_kernel<<<dim3(blocks_for(cols), 1), kBlockSize, 0, s>>>(x, rows, cols,
                                                                                    out);
        SR_CUDA_LAUNCH_CHECK(s);
        return;
    }
    SR_CHECK(num_partials < 65536, "column_sums: {} rows is too many", rows);
    DeviceScratch partial(stream, static_cast<size_t>(num_partials * cols) * sizeof(float));
    column_partial_sums_kernel<<<dim3(blocks_for(cols), static_cast<unsigned>(num_partials)),
                                 kBlockSize, 0, s>>>(x, rows, cols, partial.as<float>());
    SR_CUDA_LAUNCH_CHECK(s);
    // The partials are [num_partials, cols]: sum them the same way (at most 1024 rows of them).
    column_sums(stream, partial.as<float>(), num_partials, cols, out);
}

}  // namespace shardrec::kernels::cuda
