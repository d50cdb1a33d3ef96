// DLRM and DLRM_DCN (TorchRec torchrec.models.dlrm): a sparse arch (EmbeddingBagCollection), a
// dense arch (bottom MLP to the embedding dim), an interaction (pairwise dots, or a DCNv2
// low-rank cross net over concat(dense, pooled) as in MLPerf DLRM-DCNv2) and an over arch (top MLP
// whose last layer is linear and gives the logit). Letters: B batch, F features, D embedding dim.
#pragma once

#include <memory>

#include "engine/modules/interaction.h"
#include "engine/modules/mlp.h"
#include "engine/modules/model.h"

namespace shardrec {

class DLRM : public RecModel {
public:
    enum class Interaction { kDot, kDcn };

    DLRM(const ModelConfig& model,
         uint64_t seed,
         std::unique_ptr<EmbeddingBagCollectionInterface> sparse_arch,
         Interaction interaction);

    const Tensor& forward(const Batch& batch, Stream& stream) override;
    void backward(const Tensor& grad_logits, Stream& stream) override;
    void move_dense_to(Device device) override;

    EmbeddingBagCollectionInterface& sparse_arch() override { return *sparse_arch_; }

    std::vector<Parameter*> parameters() override;

private:
    Interaction interaction_kind_;
    std::unique_ptr<EmbeddingBagCollectionInterface> sparse_arch_;
    std::unique_ptr<MLP> dense_arch_;
    std::unique_ptr<InteractionArch> dot_;
    std::unique_ptr<InteractionDCNArch> dcn_;
    std::unique_ptr<MLP> over_arch_;  // top MLP but its last layer (ReLU after each); may be null
    std::unique_ptr<Perceptron> over_final_;  // the last linear layer: [B, top_mlp[-2]] -> [B, 1]
    Tensor logits_;                           // [B] view of over_final_'s [B, 1] output
};

}  // namespace shardrec
