// RecModel: the interface the training loop drives, and the factory that builds a model from its
// YAML description (one table of model types, STYLE.md R11). A forward takes a host Batch and
// returns the logits; the backward writes dense parameter gradients and updates the embedding
// rows through the fused optimizer inside the embedding backward.
#pragma once

#include <memory>

#include "engine/config/config.h"
#include "engine/modules/embedding_bag_collection.h"
#include "engine/modules/embedding_bag_collection_interface.h"
#include "engine/modules/module.h"
#include "engine/sparse/batch.h"
#include "kernels/embedding_optimizer.h"

namespace shardrec {

class RecModel : public Module {
public:
    // logits [B] f32 on the dense layers' device, valid until the next forward. batch: dense and
    // labels on that device, the sparse features on the host. Work is ordered on `stream` (a
    // stream of that device).
    virtual const Tensor& forward(const Batch& batch, Stream& stream) = 0;
    // grad_logits [B] f32 (d loss / d logit). Writes every Parameter::grad and applies the fused
    // embedding optimizer to the rows the batch touched.
    virtual void backward(const Tensor& grad_logits, Stream& stream) = 0;
    virtual EmbeddingBagCollectionInterface& sparse_arch() = 0;
    // Moves the dense layers (not the sparse arch, built on its own device) to `device`.
    virtual void move_dense_to(Device device) = 0;
};

// The fused optimizer of the embedding tables, from optimizer.sparse.
kernels::FusedOptimizerParams sparse_optimizer_params(const OptimizerConfig::Sparse& sparse);

// The tables of model.tables as EmbeddingBagConfigs, and whether the collection is weighted (when
// any table is: the data carries weights, unweighted features weight 1).
std::vector<EmbeddingBagConfig> embedding_bag_configs(const ModelConfig& model);
bool is_weighted(const ModelConfig& model);

// The unsharded sparse arch: one EmbeddingBagCollection over model.tables in this process.
std::unique_ptr<EmbeddingBagCollection> make_embedding_bag_collection(
    const ModelConfig& model,
    uint64_t seed,
    const kernels::FusedOptimizerParams& sparse_optimizer,
    Device device = Device::cpu());

// model.type: dlrm | dlrm_dcn | deepfm, around a sparse arch over model.tables (unsharded, or
// sharded over the ranks by engine/distributed).
std::unique_ptr<RecModel> make_model(const ModelConfig& model,
                                     uint64_t seed,
                                     std::unique_ptr<EmbeddingBagCollectionInterface> sparse_arch);

}  // namespace shardrec
