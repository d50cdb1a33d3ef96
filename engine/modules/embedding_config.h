// Embedding table configs (TorchRec EmbeddingBagConfig / EmbeddingConfig) and the deterministic
// row initialisation every embedding module uses: element (row, col) of table t is a pure
// function of (seed, t, row, col), so any sharding of the rows or columns builds the same model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/pooling_mode.h"
#include "engine/core/tensor.h"

namespace shardrec {

// A pooled table. A table listed under several feature_names is shared: each feature gets its own
// pooled output (TorchRec).
struct EmbeddingBagConfig {
    std::string name;
    int64_t num_embeddings = 0;
    int64_t embedding_dim = 0;
    std::vector<std::string> feature_names;
    PoolingMode pooling = PoolingMode::kSum;
    DType data_type = DType::kF32;  // row storage: f32, f16 or bf16 (pooled outputs are f32)
};

// A sequence (non-pooled) table, for EmbeddingCollection.
struct EmbeddingConfig {
    std::string name;
    int64_t num_embeddings = 0;
    int64_t embedding_dim = 0;
    std::vector<std::string> feature_names;
    DType data_type = DType::kF32;
};

// TorchRec's default init: uniform in [-sqrt(1/num_embeddings), +sqrt(1/num_embeddings)], here
// drawn from rng::uniform(seed, table_index, row, col).
float embedding_init_value(uint64_t seed, int64_t table_index, int64_t row, int64_t col,
                           int64_t num_embeddings);

// Fills rows [R, C] (f32/f16/bf16, host) with the values of table rows [row_begin, row_begin + R)
// and columns [col_begin, col_begin + C), rounded to nearest in the storage dtype.
void init_embedding_rows(Tensor& rows, uint64_t seed, int64_t table_index, int64_t row_begin,
                         int64_t col_begin, int64_t num_embeddings);

}  // namespace shardrec
