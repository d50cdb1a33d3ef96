// Embedding table initialisation: argument checks (all of them, once) and the device switch.
#include "kernels/embedding_init.h"

#include <cmath>

namespace shardrec::kernels {

float embedding_init_value(
    uint64_t seed, int64_t table, int64_t row, int64_t col, int64_t num_embeddings) {
    const uint64_t bits = rng::hash(seed ^ kEmbeddingInitSalt, static_cast<uint64_t>(table),
                                    static_cast<uint64_t>(row), static_cast<uint64_t>(col));
    return embedding_init_from_bits(bits, std::sqrt(1.0 / static_cast<double>(num_embeddings)));
}

void embedding_init(Tensor& rows,
                    uint64_t seed,
                    int64_t table,
                    int64_t row_begin,
                    int64_t col_begin,
                    int64_t num_embeddings,
                    Stream& stream,
                    const Tensor* which) {
    SR_CHECK(rows.defined() && rows.dim() == 2 && is_floating(rows.dtype()),
             "embedding_init: rows must be a [R, C] f32, f16 or bf16 tensor, got {}",
             rows.defined() ? rows.str() : "undefined");
    SR_CHECK(table >= 0 && row_begin >= 0 && col_begin >= 0,
             "embedding_init: table {}, row_begin {} and col_begin {} must be >= 0", table,
             row_begin, col_begin);
    SR_CHECK(num_embeddings > 0, "embedding_init: num_embeddings must be > 0, got {}",
             num_embeddings);
    EmbeddingInit p;
    p.key = seed ^ kEmbeddingInitSalt;
    p.table = static_cast<uint64_t>(table);
    p.row_begin = row_begin;
    p.col_begin = col_begin;
    p.bound = std::sqrt(1.0 / static_cast<double>(num_embeddings));
    if (which != nullptr) {
        SR_CHECK(which->defined() && which->dim() == 1 && which->dtype() == DType::kI64 &&
                     which->device() == rows.device(),
                 "embedding_init: which must be an i64 [N] tensor on {}, got {}",
                 rows.device().str(), which->defined() ? which->str() : "undefined");
        p.which = which->data<int64_t>();
        p.num_which = which->numel();
        if (rows.device().is_cpu()) {
            for (int64_t i = 0; i < p.num_which; ++i) {
                SR_CHECK(p.which[i] >= 0 && p.which[i] < rows.size(0),
                         "embedding_init: which[{}] = {} is not a row of the [{}, {}] rows", i,
                         p.which[i], rows.size(0), rows.size(1));
            }
        }
        if (p.num_which == 0)
            return;
    }
    if (rows.numel() == 0)
        return;
    switch (rows.device().type) {
        case DeviceType::kCpu:
            return cpu::embedding_init(rows, p);
        case DeviceType::kCuda:
            return cuda::embedding_init(rows, p, stream);
    }
}

}  // namespace shardrec::kernels
