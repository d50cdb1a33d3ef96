// Deterministic embedding row initialisation (see embedding_config.h).
#include "engine/modules/embedding_config.h"

#include <cmath>

#include "engine/core/rng.h"

namespace shardrec {
namespace {

// Keeps the embedding init stream apart from other users of rng::uniform(seed, ...).
constexpr uint64_t kEmbeddingInitSalt = 0x656d625f696e6974ull;  // "emb_init"

}  // namespace

float embedding_init_value(uint64_t seed, int64_t table_index, int64_t row, int64_t col,
                           int64_t num_embeddings) {
    const double bound = std::sqrt(1.0 / static_cast<double>(num_embeddings));
    const double u = rng::uniform(seed ^ kEmbeddingInitSalt, static_cast<uint64_t>(table_index),
                                  static_cast<uint64_t>(row), static_cast<uint64_t>(col));
    return static_cast<float>((2.0 * u - 1.0) * bound);
}

void init_embedding_rows(Tensor& rows, uint64_t seed, int64_t table_index, int64_t row_begin,
                         int64_t col_begin, int64_t num_embeddings) {
    SR_CHECK(rows.device().is_cpu() && rows.dim() == 2 && is_floating(rows.dtype()),
             "init_embedding_rows: need a host [R, C] float tensor, got {}", rows.str());
    SR_CHECK(num_embeddings > 0, "init_embedding_rows: num_embeddings must be > 0");
    const int64_t num_rows = rows.size(0), num_cols = rows.size(1);
    visit_float_dtype(rows.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = rows.data<T>();
        for (int64_t r = 0; r < num_rows; ++r) {
            for (int64_t c = 0; c < num_cols; ++c) {
                p[r * num_cols + c] = from_float<T>(embedding_init_value(
                    seed, table_index, row_begin + r, col_begin + c, num_embeddings));
            }
        }
    });
}

}  // namespace shardrec
