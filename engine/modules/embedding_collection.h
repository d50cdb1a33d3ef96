// EmbeddingCollection (TorchRec): sequence (non-pooled) lookups, one embedding row per id. Every
// table has the same embedding_dim and data_type (TorchRec's embedding_dim() is one int), so all
// tables form one table-batched weights tensor [sum E, D] looked up by one kernel call. The
// optimizer is fused into backward (only touched rows change); there is no dense mode here.
// Rows come from (seed, table index, row) only, as in EmbeddingBagCollection.
// Letters: T tables, F features, B batch, D dim, N ids, L_f ids of feature f.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/core/stream.h"
#include "engine/modules/embedding_config.h"
#include "engine/modules/module.h"
#include "engine/sparse/jagged_tensor.h"
#include "engine/sparse/keyed_jagged_tensor.h"
#include "kernels/sequence_embedding.h"

namespace shardrec {

class EmbeddingCollection : public Module {
public:
    EmbeddingCollection(std::vector<EmbeddingConfig> tables,
                        uint64_t seed,
                        kernels::FusedOptimizerParams fused_optimizer,
                        Device device = Device::cpu());

    // feature -> JaggedTensor, features in table order then feature_names order: values
    // [L_f, D] f32 (one row per id, views into a buffer the next forward reuses), lengths the
    // KJT's lengths of that key. The KJT may list keys in any order; a missing feature is an Error.
    std::vector<std::pair<std::string, JaggedTensor>> forward(const KeyedJaggedTensor& features,
                                                              Stream& stream = Stream::cpu());

    // d loss / d values for the latest forward: one [L_f, D] f32 per feature, by name, in any
    // order (every feature once). Duplicate ids are aggregated and each touched row is updated
    // once; then optimizer step() advances.
    void backward(const std::vector<std::pair<std::string, Tensor>>& grads,
                  Stream& stream = Stream::cpu());

    const std::vector<EmbeddingConfig>& embedding_configs() const { return tables_; }

    int64_t embedding_dim() const { return dim_; }

    const std::vector<std::string>& embedding_names() const { return names_; }  // output keys

    void set_learning_rate(float lr) { optim_.learning_rate = lr; }

    const kernels::FusedOptimizerParams& fused_optimizer() const { return optim_; }

    void set_optimizer_step(int64_t step);

    Tensor weight(int64_t table) const;  // [E, D] view
    // As EmbeddingBagCollection::optimizer_state: none, {G [E, D]}, {G [E]} or {m, v [E, D]}.
    std::vector<Tensor> optimizer_state(int64_t table) const;

    int64_t num_parameters() const { return weights_.numel(); }

    int64_t parameter_bytes() const { return static_cast<int64_t>(weights_.nbytes()); }

    int64_t optimizer_state_bytes() const;

private:
    std::vector<EmbeddingConfig> tables_;
    kernels::FusedOptimizerParams optim_;
    int64_t dim_ = 0;
    std::vector<std::string> names_;
    std::vector<int64_t> table_row_offsets_;  // [T + 1]
    Tensor weights_, table_offsets_, feature_table_, state1_, state2_;
    kernels::EmbeddingBackwardWorkspace workspace_;
    KjtFeaturePacker packer_;
    Tensor out_buffer_, grad_buffer_;
    Tensor out_;  // [N, D] of the latest forward
};

}  // namespace shardrec
