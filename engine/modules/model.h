// RecModel: the interface the training loop drives, and the factory that builds a model from its
// YAML description (one table of model types, STYLE.md R11). A forward takes a host Batch and
// returns the logits; the backward writes dense parameter gradients and updates the embedding
// rows through the fused optimizer inside the embedding backward.
#pragma once

#include <memory>

#include "engine/config/config.h"
#include "engine/data/batch.h"
#include "engine/modules/embedding_bag_collection.h"
#include "engine/modules/module.h"
#include "kernels/embedding_optimizer.h"

namespace shardrec {

class RecModel : public Module {
public:
    // logits [B] f32, valid until the next forward.
    virtual const Tensor& forward(const Batch& batch) = 0;
    // grad_logits [B] f32 (d loss / d logit). Writes every Parameter::grad and applies the fused
    // embedding optimizer to the rows the batch touched.
    virtual void backward(const Tensor& grad_logits) = 0;
    virtual EmbeddingBagCollection& sparse_arch() = 0;
};

// The fused optimizer of the embedding tables, from optimizer.sparse.
kernels::FusedOptimizerParams sparse_optimizer_params(const OptimizerConfig::Sparse& sparse);

// The sparse arch of every model: one EmbeddingBagCollection over model.tables. It is weighted
// when any table is (unweighted features then carry weight 1).
std::unique_ptr<EmbeddingBagCollection> make_embedding_bag_collection(
    const ModelConfig& model, uint64_t seed, const kernels::FusedOptimizerParams& sparse_optimizer);

// model.type: dlrm | dlrm_dcn | deepfm.
std::unique_ptr<RecModel> make_model(const ModelConfig& model, uint64_t seed,
                                     const kernels::FusedOptimizerParams& sparse_optimizer);

}  // namespace shardrec
