#include "engine/modules/dlrm.h"

#include "engine/core/profile.h"

namespace shardrec {

DLRM::DLRM(const ModelConfig& model,
           uint64_t seed,
           std::unique_ptr<EmbeddingBagCollectionInterface> sparse_arch,
           Interaction interaction)
    : interaction_kind_(interaction), sparse_arch_(std::move(sparse_arch)) {
    const int64_t D = model.tables.front().embedding_dim;
    int64_t F = 0;
    for (const auto& t : model.tables)
        F += static_cast<int64_t>(t.feature_names.size());
    dense_arch_ = std::make_unique<MLP>("dense_arch.model", model.dense_in_features,
                                        model.bottom_mlp, kernels::Activation::kRelu, seed);
    int64_t over_in = 0;
    if (interaction == Interaction::kDot) {
        dot_ = std::make_unique<InteractionArch>(F, D);
        over_in = D + F * (F + 1) / 2;
    } else {
        dcn_ = std::make_unique<InteractionDCNArch>("inter_arch.crossnet", F, D,
                                                    model.dcn.num_layers, model.dcn.low_rank, seed);
        over_in = D * (F + 1);
    }
    std::vector<int64_t> hidden(model.top_mlp.begin(), model.top_mlp.end() - 1);
    if (!hidden.empty()) {
        over_arch_ = std::make_unique<MLP>("over_arch.model", over_in, hidden,
                                           kernels::Activation::kRelu, seed);
    }
    const int64_t last_in = hidden.empty() ? over_in : hidden.back();
    over_final_ = std::make_unique<Perceptron>("over_arch.final", last_in, 1,
                                               kernels::Activation::kIdentity, seed);
}

const Tensor& DLRM::forward(const Batch& batch, Stream& stream) {
    const Tensor& dense = profile::timed("dense_arch", stream, [&]() -> const Tensor& {
        return dense_arch_->forward(batch.dense, stream);
    });
    const KeyedTensor pooled = profile::timed(
        "sparse_arch", stream, [&] { return sparse_arch_->forward(batch.sparse, stream); });
    const Tensor& inter = profile::timed("inter_arch", stream, [&]() -> const Tensor& {
        return interaction_kind_ == Interaction::kDot
                   ? dot_->forward(dense, pooled.values(), stream)
                   : dcn_->forward(dense, pooled.values(), stream);
    });
    profile::Range r("over_arch", stream);
    const Tensor& out =
        over_final_->forward(over_arch_ ? over_arch_->forward(inter, stream) : inter, stream);
    logits_ = out.view({out.size(0)});
    return logits_;
}

void DLRM::backward(const Tensor& grad_logits, Stream& stream) {
    const Tensor& g_inter = profile::timed("over_arch", stream, [&]() -> const Tensor& {
        const Tensor& g_hidden =
            over_final_->backward(grad_logits.view({grad_logits.numel(), 1}), stream);
        return over_arch_ ? over_arch_->backward(g_hidden, stream) : g_hidden;
    });
    {
        profile::Range r("inter_arch", stream);
        if (interaction_kind_ == Interaction::kDot) {
            dot_->backward(g_inter, stream);
        } else {
            dcn_->backward(g_inter, stream);
        }
    }
    const bool dot = interaction_kind_ == Interaction::kDot;
    {
        profile::Range r("dense_arch", stream);
        dense_arch_->backward(dot ? dot_->grad_dense() : dcn_->grad_dense(), stream);
    }
    profile::Range r("sparse_arch", stream);
    sparse_arch_->backward(dot ? dot_->grad_sparse() : dcn_->grad_sparse(), stream);
}

void DLRM::move_dense_to(Device device) {
    move_parameters(*dense_arch_, device);
    if (dcn_)
        move_parameters(*dcn_, device);
    if (over_arch_)
        move_parameters(*over_arch_, device);
    move_parameters(*over_final_, device);
}

std::vector<Parameter*> DLRM::parameters() {
    std::vector<Parameter*> out;
    append_parameters(out, *dense_arch_);
    if (dcn_)
        append_parameters(out, *dcn_);
    if (over_arch_)
        append_parameters(out, *over_arch_);
    append_parameters(out, *over_final_);
    append_parameters(out, *sparse_arch_);  // position weights (tables own a fused optimizer)
    return out;
}

}  // namespace shardrec
