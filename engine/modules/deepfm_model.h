// DeepFMModel (TorchRec's SimpleDeepFMNN): the dense features go through the bottom MLP to the
// embedding dim and join the pooled embeddings; the FM interaction arch feeds concat(dense, pooled)
// to a deep MLP (DeepFM) and to a FactorizationMachine; the over arch (top MLP, last layer linear)
// maps concat(dense, deep, fm) to the logit. Letters: B batch, F features, D embedding dim.
#pragma once

#include <memory>

#include "engine/modules/deepfm.h"
#include "engine/modules/mlp.h"
#include "engine/modules/model.h"

namespace shardrec {

class DeepFMModel : public RecModel {
public:
    DeepFMModel(const ModelConfig& model,
                uint64_t seed,
                std::unique_ptr<EmbeddingBagCollectionInterface> sparse_arch);

    const Tensor& forward(const Batch& batch, Stream& stream) override;
    void backward(const Tensor& grad_logits, Stream& stream) override;
    void move_dense_to(Device device) override;

    EmbeddingBagCollectionInterface& sparse_arch() override { return *sparse_arch_; }

    std::vector<Parameter*> parameters() override;

private:
    int64_t F_, D_, deep_out_;
    std::unique_ptr<EmbeddingBagCollectionInterface> sparse_arch_;
    std::unique_ptr<MLP> dense_arch_;  // [B, 13] -> [B, D], ReLU after each layer
    std::unique_ptr<MLP> deep_;        // [B, (F + 1) D] -> [B, deep_out]
    std::unique_ptr<FactorizationMachine> fm_;
    std::unique_ptr<MLP> over_arch_;          // top MLP but its last layer; may be null
    std::unique_ptr<Perceptron> over_final_;  // -> [B, 1], linear
    Tensor combined_;                         // [B, (F + 1) D] = concat(dense, pooled)
    Tensor over_in_;                          // [B, D + deep_out + 1]
    Tensor grad_combined_;                    // [B, (F + 1) D]
    Tensor grad_dense_;                       // [B, D]: from over_in, plus grad_dense_combined_
    Tensor grad_dense_combined_;              // [B, D]
    Tensor grad_deep_;                        // [B, deep_out]
    Tensor grad_fm_;                          // [B, 1]
    Tensor grad_pooled_;                      // [B, F D]
    Tensor logits_;
};

}  // namespace shardrec
