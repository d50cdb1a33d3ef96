// Embedding table initialisation on the CPU: OpenMP over rows; each row hashes its (seed, table,
// row) prefix once and finishes one hash per column.
#include "kernels/embedding_init.h"

namespace shardrec::kernels::cpu {
namespace {

template <typename T>
void fill(T* out, int64_t num_rows, int64_t num_cols, const EmbeddingInit& p) {
#pragma omp parallel for schedule(static) if (num_rows * num_cols > (int64_t{1} << 16))
    for (int64_t r = 0; r < num_rows; ++r) {
        const uint64_t prefix =
            rng::hash_prefix(p.key, p.table, static_cast<uint64_t>(p.row_begin + r));
        T* row = out + r * num_cols;
        for (int64_t c = 0; c < num_cols; ++c) {
            const uint64_t bits = rng::hash_suffix(prefix, static_cast<uint64_t>(p.col_begin + c));
            row[c] = from_float<T>(embedding_init_from_bits(bits, p.bound));
        }
    }
}

}  // namespace

void embedding_init(Tensor& rows, const EmbeddingInit& p) {
    visit_float_dtype(rows.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        fill(rows.data<T>(), rows.size(0), rows.size(1), p);
    });
}

}  // namespace shardrec::kernels::cpu
