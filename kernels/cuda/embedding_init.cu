// Embedding table initialisation on CUDA: one thread per value (of every row, or of the listed
// rows), the same hash and arithmetic as the CPU definition (kernels/embedding_init.h), so both
// backends write the same bits.
#include "kernels/cuda/common.cuh"
#include "kernels/embedding_init.h"

namespace shardrec::kernels::cuda {
namespace {

template <typename T>
__global__ void embedding_init_kernel(T* out, int64_t num_rows, int64_t num_cols, EmbeddingInit p) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t n = p.which != nullptr ? p.num_which : num_rows;
    if (i >= n * num_cols)
        return;
    const int64_t k = i / num_cols, c = i - k * num_cols;
    const int64_t r = p.which != nullptr ? p.which[k] : k;
    if (r < 0 || r >= num_rows)
        return;
    const uint64_t prefix =
        rng::hash_prefix(p.key, p.table, static_cast<uint64_t>(p.row_begin + r));
    const uint64_t bits = rng::hash_suffix(prefix, static_cast<uint64_t>(p.col_begin + c));
    out[r * num_cols + c] = from_f32<T>(embedding_init_from_bits(bits, p.bound));
}

}  // namespace

void embedding_init(Tensor& rows, const EmbeddingInit& p, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    const int64_t num_rows = rows.size(0), num_cols = rows.size(1);
    const int64_t n = p.which != nullptr ? p.num_which : num_rows;
    visit_float_dtype(rows.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        embedding_init_kernel<T>
            <<<blocks_for(n * num_cols), kBlockSize, 0, s>>>(rows.data<T>(), num_rows, num_cols, p);
        SR_CUDA_LAUNCH_CHECK(s);
    });
}

}  // namespace shardrec::kernels::cuda
