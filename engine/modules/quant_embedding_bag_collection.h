// QuantEmbeddingBagCollection (TorchRec torchrec.quant.embedding_modules): the pooled lookups of an
// EmbeddingBagCollection for inference, straight from quantized rows
// (kernels/quant_embedding_bag.h: FBGEMM's IntNBit layout, tables of mixed types and dims in one
// kernel call). Forward only: its backward is an Error. Tables are grouped by pooling mode (one
// kernel call per mode); a table's rows stay as stored, never dequantized into a copy. Host only.
// Letters: B batch, D dim.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/modules/embedding_bag_collection_interface.h"
#include "engine/modules/embedding_config.h"
#include "engine/modules/position_weighted.h"
#include "kernels/quant_embedding_bag.h"

namespace shardrec {

// One table's stored rows: u8 [num_embeddings * quant_row_bytes(type, embedding_dim)].
struct QuantTable {
    EmbeddingBagConfig config;  // name, rows, dim, features, pooling (data_type is ignored)
    kernels::QuantType type = kernels::QuantType::kInt8;
    Tensor rows;
};

class QuantEmbeddingBagCollection : public EmbeddingBagCollectionInterface {
public:
    // is_weighted: the KJT carries per-id weights (unweighted features weight 1). The features of
    // position-weighted tables get their learned position weights (parameters(), f32, loaded
    // from the model's dense parameters) before the lookup, as the training collection applies
    // them (TorchRec's feature-processed quantized collection).
    QuantEmbeddingBagCollection(std::vector<QuantTable> tables, bool is_weighted);

    // Keys embedding_names() (feature names in table order, then feature_names order), values
    // [B, sum D] f32, reused by the next forward.
    KeyedTensor forward(const KeyedJaggedTensor& features, Stream& stream = Stream::cpu()) override;
    void backward(const Tensor& grad_values, Stream& stream) override;  // an Error

    void set_learning_rate(float) override {}

    const std::vector<std::string>& embedding_names() const override { return names_; }

    const std::vector<int64_t>& embedding_dims() const override { return dims_; }

    int64_t parameter_bytes() const override;  // the stored rows

    int64_t optimizer_state_bytes() const override { return 0; }

    std::vector<Parameter*> parameters() override;  // the position weights, if any

    std::vector<EmbeddingShardState> shard_states() override { return {}; }

    // Bytes the lookups have read since construction: every looked-up row (padding included) and
    // its 8-byte id. The roofline numerator of `shardrec predict`.
    int64_t bytes_read() const { return bytes_read_; }

    double lookup_seconds() const { return lookup_s_; }  // wall time inside forward

private:
    struct Group {  // the tables of one pooling mode
        PoolingMode pooling = PoolingMode::kSum;
        std::vector<size_t> tables;
        std::vector<int64_t> features;   // output key indices, in group order
        std::vector<int64_t> row_bytes;  // per group feature: its table's stored row bytes
        Tensor weights, weights_offsets, weights_tys, D_offsets, feature_table;
        KjtFeaturePacker packer;
        Tensor out;  // [B, sum D of the group's features]
    };

    std::vector<QuantTable> tables_;
    bool is_weighted_;
    std::unique_ptr<PositionWeightedModule> position_weighted_;
    bool lookup_weighted_;  // is_weighted_ or position-weighted tables
    std::vector<std::string> names_;
    std::vector<int64_t> dims_;
    std::vector<int64_t> columns_;  // first column of each output key
    int64_t sum_dims_ = 0;
    std::vector<Group> groups_;
    Tensor values_;
    int64_t bytes_read_ = 0;
    double lookup_s_ = 0;
};

}  // namespace shardrec
