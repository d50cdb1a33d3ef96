// The host side of kernels/cuda/common.cuh: scratch memory from the stream-ordered pool, one
// cuBLAS handle per thread and device, row-major GEMMs, strided copies and column sums.
#include <algorithm>
#include <climits>
#include <mutex>
#include <unordered_map>
#include <vector>

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
        SR_CUBLAS_CHECK(cublas_api().create(&h));
    }
    SR_CUBLAS_CHECK(cublas_api().set_stream(h, cuda_stream(stream)));
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

// out[(b * rows + r) * out_ld + c] = bf16(x[b * stride + r * ld + c]): x's columns across
// threads (coalesced), its (matrix, row) pairs across blockIdx.y and a loop.
__global__ void round_to_bf16_kernel(const float* x,
                                     int64_t ld,
                                     int64_t stride,
                                     int64_t rows,
                                     int64_t cols,
                                     int64_t batch,
                                     __nv_bfloat16* out,
                                     int64_t out_ld) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= cols) {
        return;
    }
    for (int64_t br = blockIdx.y; br < batch * rows; br += gridDim.y) {
        const int64_t b = br / rows;
        const int64_t r = br - b * rows;
        out[br * out_ld + c] = __float2bfloat16_rn(x[b * stride + r * ld + c]);
    }
}

// The contiguous case, 8 values a thread: two 16-byte loads, one 16-byte store.
__global__ void round_to_bf16_vec8_kernel(const float4* x, int64_t n8, uint4* out) {
    const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n8;
         i += step) {
        const float4 a = x[2 * i], b = x[2 * i + 1];
        const __nv_bfloat162 p[4] = {
            __floats2bfloat162_rn(a.x, a.y), __floats2bfloat162_rn(a.z, a.w),
            __floats2bfloat162_rn(b.x, b.y), __floats2bfloat162_rn(b.z, b.w)};
        out[i] = *reinterpret_cast<const uint4*>(p);
    }
}

}  // namespace

cublasComputeType_t gemm_compute_type(GemmMath math) {
    return math == GemmMath::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

Bf16Operand::Bf16Operand(Stream& stream,
                         const float* x,
                         int64_t rows,
                         int64_t cols,
                         int64_t ld_in,
                         int64_t batch,
                         int64_t stride_in)
    : ld(ceil_div(cols, 8) * 8),
      stride(rows * ld),
      mem(stream, static_cast<size_t>(batch * rows * ld) * sizeof(__nv_bfloat16)) {
    if (batch * rows * cols == 0) {
        return;
    }
    const cudaStream_t s = cuda_stream(stream);
    const int64_t n = batch * rows * cols;
    // One run of values in and out (no row padding, matrices back to back): 8 a thread.
    if (ld_in == cols && ld == cols && (batch == 1 || stride_in == rows * cols) && n % 8 == 0 &&
        is_aligned(x, 16)) {
        const int64_t n8 = n / 8;
        const auto blocks =
            static_cast<unsigned>(std::min<int64_t>(ceil_div(n8, kBlockSize), 8192));
        round_to_bf16_vec8_kernel<<<blocks, kBlockSize, 0, s>>>(reinterpret_cast<const float4*>(x),
                                                                n8, mem.as<uint4>());
        SR_CUDA_LAUNCH_CHECK(s);
        return;
    }
    const auto row_blocks = static_cast<unsigned>(std::min<int64_t>(batch * rows, 65535));
    round_to_bf16_kernel<<<dim3(blocks_for(cols), row_blocks), kBlockSize, 0, s>>>(
        x, ld_in, stride_in, rows, cols, batch, mem.as<__nv_bfloat16>(), ld);
    SR_CUDA_LAUNCH_CHECK(s);
}

namespace {
thread_local std::vector<const Bf16OperandScope*> g_bf16_scopes;

// A bf16 view of the stored fp32 operand x [rows, cols] (row stride ld): a scope's copy, else
// one rounded now into `own`.
const Bf16Operand& bf16_view(Stream& stream,
                             const float* x,
                             int64_t rows,
                             int64_t cols,
                             int64_t ld,
                             std::unique_ptr<Bf16Operand>& own) {
    if (const Bf16Operand* copy = Bf16OperandScope::find(cuda_stream(stream), x, rows, cols, ld)) {
        return *copy;
    }
    own = std::make_unique<Bf16Operand>(stream, x, rows, cols, ld);
    return *own;
}
}  // namespace

Bf16OperandScope::Bf16OperandScope(
    Stream& stream, const float* x, int64_t rows, int64_t cols, int64_t ld) {
    if (gemm_math() != GemmMath::kBf16) {
        return;
    }
    stream_ = cuda_stream(stream);
    x_ = x;
    rows_ = rows;
    cols_ = cols;
    ld_ = ld;
    copy_ = std::make_unique<Bf16Operand>(stream, x, rows, cols, ld);
    g_bf16_scopes.push_back(this);
}

Bf16OperandScope::~Bf16OperandScope() {
    if (copy_ != nullptr) {
        g_bf16_scopes.erase(std::find(g_bf16_scopes.begin(), g_bf16_scopes.end(), this));
    }
}

const Bf16Operand* Bf16OperandScope::find(
    cudaStream_t stream, const float* x, int64_t rows, int64_t cols, int64_t ld) {
    for (const Bf16OperandScope* s : g_bf16_scopes) {
        if (s->stream_ == stream && s->x_ == x && s->rows_ == rows && s->cols_ == cols &&
            s->ld_ == ld) {
            return s->copy_.get();
        }
    }
    return nullptr;
}

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
               float alpha) {
    // Row-major to column-major as in sgemm below.
    if (batch == 1) {
        SR_CUBLAS_CHECK(cublas_api().gemm_ex(
            cublas_handle(stream), op(tb), op(ta), to_int(n), to_int(m), to_int(k), &alpha, b,
            CUDA_R_16BF, to_int(ldb), a, CUDA_R_16BF, to_int(lda), &beta, c, CUDA_R_32F,
            to_int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    SR_CUBLAS_CHECK(cublas_api().gemm_strided_batched_ex(
        cublas_handle(stream), op(tb), op(ta), to_int(n), to_int(m), to_int(k), &alpha, b,
        CUDA_R_16BF, to_int(ldb), stride_b, a, CUDA_R_16BF, to_int(lda), stride_a, &beta, c,
        CUDA_R_32F, to_int(ldc), stride_c, to_int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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
    const GemmMath math = gemm_math();
    if (math == GemmMath::kBf16) {
        // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
        const bool at = ta == Trans::kYes, bt = tb == Trans::kYes;
        std::unique_ptr<Bf16Operand> a_own, b_own;
        const Bf16Operand& a16 = bf16_view(stream, a, at ? k : m, at ? m : k, lda, a_own);
        const Bf16Operand& b16 = bf16_view(stream, b, bt ? n : k, bt ? k : n, ldb, b_own);
        return gemm_bf16(stream, ta, tb, m, n, k, a16.data(), a16.ld, 0, b16.data(), b16.ld, 0,
                         beta, c, ldc, 0, 1, alpha);
    }
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands and
    // m, n; a row-major matrix with row stride ld is its column-major transpose with that ld.
    SR_CUBLAS_CHECK(cublas_api().gemm_ex(
        cublas_handle(stream), op(tb), op(ta), to_int(n), to_int(m), to_int(k), &alpha, b,
        CUDA_R_32F, to_int(ldb), a, CUDA_R_32F, to_int(lda), &beta, c, CUDA_R_32F, to_int(ldc),
        gemm_compute_type(math), CUBLAS_GEMM_DEFAULT));
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
    const GemmMath math = gemm_math();
    if (math == GemmMath::kBf16) {
        const bool at = ta == Trans::kYes, bt = tb == Trans::kYes;
        const Bf16Operand a16(stream, a, at ? k : m, at ? m : k, lda, batch, stride_a);
        const Bf16Operand b16(stream, b, bt ? n : k, bt ? k : n, ldb, batch, stride_b);
        return gemm_bf16(stream, ta, tb, m, n, k, a16.data(), a16.ld, a16.stride, b16.data(),
                         b16.ld, b16.stride, beta, c, ldc, stride_c, batch);
    }
    const float alpha = 1.f;
    SR_CUBLAS_CHECK(cublas_api().gemm_strided_batched_ex(
        cublas_handle(stream), op(tb), op(ta), to_int(n), to_int(m), to_int(k), &alpha, b,
        CUDA_R_32F, to_int(ldb), stride_b, a, CUDA_R_32F, to_int(lda), stride_a, &beta, c,
        CUDA_R_32F, to_int(ldc), stride_c, to_int(batch), gemm_compute_type(math),
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
