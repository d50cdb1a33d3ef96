// Embedding table configs (TorchRec EmbeddingBagConfig / EmbeddingConfig), and what every
// embedding module shares: the deterministic row initialisation (element (row, col) of table t is
// a pure function of (seed, t, row, col), so any sharding of rows or columns builds the same
// model) and the packing of KJT keys into the table-batched lookup layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/pooling_mode.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/sparse/keyed_jagged_tensor.h"

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
    // n > 0: the table's features are position-weighted (PositionWeightedModule): the id at
    // position j < n of a bag is weighted by the learned position_weights.<feature>[j].
    int64_t position_weights = 0;
};

// A sequence (non-pooled) table, for EmbeddingCollection.
struct EmbeddingConfig {
    std::string name;
    int64_t num_embeddings = 0;
    int64_t embedding_dim = 0;
    std::vector<std::string> feature_names;
    DType data_type = DType::kF32;
};

// The rules of an EmbeddingCollection's tables (module names the collection in errors): at least
// one table, unique table and feature names, rows, a dim and features on each, and one
// embedding_dim and data_type for all (TorchRec: the sequence all-to-all does not mix dims).
// Returns the table of each feature, in table then feature_names order.
std::vector<int64_t> check_sequence_tables(const std::string& module,
                                           const std::vector<EmbeddingConfig>& tables);

// Fills rows [R, C] (f32/f16/bf16, on any device) with the initial values of table rows
// [row_begin, row_begin + R) and columns [col_begin, col_begin + C): TorchRec's default init, a
// pure function of (seed, table_index, row, col) (kernels/embedding_init.h). Returns once they
// are written.
void init_embedding_rows(Tensor& rows,
                         uint64_t seed,
                         int64_t table_index,
                         int64_t row_begin,
                         int64_t col_begin,
                         int64_t num_embeddings);

// Gathers the bags of some KJT keys, in a fixed order, into the layout of kernels/embedding_bag.h:
// ids [N] i64, offsets [F*B + 1] i64 (bag f*B + b), weights [N] f32. When the KJT holds exactly
// these keys in this order its own tensors are used (no copy); otherwise the keys are copied into
// buffers that only grow, so packing a batch shape already seen allocates nothing. Host KJTs with
// one stride for every key. The packed views stay valid until the next pack().
class KjtFeaturePacker {
public:
    KjtFeaturePacker() = default;
    // module: named in errors ("EmbeddingBagCollection").
    KjtFeaturePacker(std::string module, std::vector<std::string> feature_names);

    // Errors name a missing feature, a variable batch per key, or missing weights when weighted.
    void pack(const KeyedJaggedTensor& kjt, bool weighted);

    const Tensor& ids() const { return ids_; }

    const Tensor& offsets() const { return offsets_; }

    const Tensor& weights() const { return weights_; }  // undefined unless packed weighted

    int64_t batch() const { return batch_; }

    int64_t num_features() const { return static_cast<int64_t>(names_.size()); }

    bool is_direct() const { return direct_; }

    // Feature i (in packer order): its values in the packed ids start at packed_begin(i); in the
    // KJT they are [kjt_begin(i), kjt_begin(i) + count(i)) and its lengths start at
    // kjt_lengths_begin(i).
    int64_t packed_begin(size_t i) const { return packed_begin_[i]; }

    int64_t kjt_begin(size_t i) const { return kjt_begin_[i]; }

    int64_t count(size_t i) const { return count_[i]; }

    int64_t kjt_lengths_begin(size_t i) const { return kjt_lengths_[i]; }

    // Copies per-id floats from packed order to the latest KJT's value order (dst [N of the KJT];
    // values of keys not packed are left as they are).
    void scatter_to_kjt_order(const float* packed, float* kjt_order) const;

private:
    std::string module_;
    std::vector<std::string> names_;
    std::vector<int64_t> packed_begin_, kjt_begin_, count_, kjt_lengths_;
    Tensor ids_, offsets_, weights_;
    Tensor ids_buffer_, offsets_buffer_, weights_buffer_;
    int64_t batch_ = 0;
    bool direct_ = false;
};

}  // namespace shardrec
