#include "engine/modules/deepfm_model.h"

#include "engine/core/profile.h"
#include "engine/modules/init.h"
#include "engine/modules/interaction.h"
#include "kernels/elementwise.h"

namespace shardrec {

DeepFMModel::DeepFMModel(const ModelConfig& model,
                         uint64_t seed,
                         std::unique_ptr<EmbeddingBagCollectionInterface> sparse_arch)
    : sparse_arch_(std::move(sparse_arch)) {
    D_ = model.tables.front().embedding_dim;
    F_ = 0;
    for (const auto& t : model.tables)
        F_ += static_cast<int64_t>(t.feature_names.size());
    dense_arch_ = std::make_unique<MLP>("dense_arch.model", model.dense_in_features,
                                        model.bottom_mlp, kernels::Activation::kRelu, seed);
    deep_ = std::make_unique<MLP>("inter_arch.deep_fm.dense_module", (F_ + 1) * D_,
                                  model.deepfm.hidden, kernels::Activation::kRelu, seed);
    deep_out_ = deep_->out_features();
    fm_ = std::make_unique<FactorizationMachine>();
    const int64_t over_in = D_ + deep_out_ + 1;
    const std::vector<int64_t> hidden(model.top_mlp.begin(), model.top_mlp.end() - 1);
    if (!hidden.empty()) {
        over_arch_ = std::make_unique<MLP>("over_arch.model", over_in, hidden,
                                           kernels::Activation::kRelu, seed);
    }
    over_final_ =
        std::make_unique<Perceptron>("over_arch.final", hidden.empty() ? over_in : hidden.back(), 1,
                                     kernels::Activation::kIdentity, seed);
}

const Tensor& DeepFMModel::forward(const Batch& batch, Stream& stream) {
    const int64_t B = batch.batch_size();
    const Tensor& dense = profile::timed("dense_arch", stream, [&]() -> const Tensor& {
        return dense_arch_->forward(batch.dense, stream);
    });
    const KeyedTensor pooled = profile::timed(
        "sparse_arch", stream, [&] { return sparse_arch_->forward(batch.sparse, stream); });
    {
        profile::Range r("inter_arch", stream);  // the deep and FM branches
        init::reuse_or_allocate(combined_, {B, (F_ + 1) * D_}, dense.device());
        copy_into_columns(combined_, 0, dense, stream);
        copy_into_columns(combined_, D_, pooled.values(), stream);
        const Tensor& deep = deep_->forward(combined_, stream);
        const Tensor& fm = fm_->forward(combined_, stream);
        init::reuse_or_allocate(over_in_, {B, D_ + deep_out_ + 1}, dense.device());
        copy_into_columns(over_in_, 0, dense, stream);
        copy_into_columns(over_in_, D_, deep, stream);
        copy_into_columns(over_in_, D_ + deep_out_, fm, stream);
    }
    profile::Range r("over_arch", stream);
    const Tensor& out =
        over_final_->forward(over_arch_ ? over_arch_->forward(over_in_, stream) : over_in_, stream);
    logits_ = out.view({B});
    return logits_;
}

void DeepFMModel::backward(const Tensor& grad_logits, Stream& stream) {
    const int64_t B = grad_logits.numel();
    const Device device = grad_logits.device();
    const Tensor& g_over_in = profile::timed("over_arch", stream, [&]() -> const Tensor& {
        const Tensor& g_final_in = over_final_->backward(grad_logits.view({B, 1}), stream);
        return over_arch_ ? over_arch_->backward(g_final_in, stream) : g_final_in;
    });
    {
        profile::Range r("inter_arch", stream);
        // over_in = [dense | deep | fm]: split its gradient and send each part back.
        init::reuse_or_allocate(grad_dense_, {B, D_}, device);
        copy_from_columns(grad_dense_, g_over_in, 0, stream);
        init::reuse_or_allocate(grad_deep_, {B, deep_out_}, device);
        init::reuse_or_allocate(grad_fm_, {B, 1}, device);
        copy_from_columns(grad_deep_, g_over_in, D_, stream);
        copy_from_columns(grad_fm_, g_over_in, D_ + deep_out_, stream);
        const Tensor& g_combined_deep = deep_->backward(grad_deep_, stream);
        const Tensor& g_combined_fm = fm_->backward(grad_fm_, stream);
        // combined fed both the deep and the FM branch: its gradient is the sum of theirs.
        init::reuse_or_allocate(grad_combined_, {B, (F_ + 1) * D_}, device);
        copy_async(grad_combined_.data_ptr(), device, g_combined_deep.data_ptr(), device,
                   grad_combined_.nbytes(), stream);
        kernels::add_(grad_combined_, g_combined_fm, stream);
        // combined = [dense | pooled]; dense also fed over_in directly.
        init::reuse_or_allocate(grad_pooled_, {B, F_ * D_}, device);
        copy_from_columns(grad_pooled_, grad_combined_, D_, stream);
        init::reuse_or_allocate(grad_dense_combined_, {B, D_}, device);
        copy_from_columns(grad_dense_combined_, grad_combined_, 0, stream);
        kernels::add_(grad_dense_, grad_dense_combined_, stream);
    }
    {
        profile::Range r("dense_arch", stream);
        dense_arch_->backward(grad_dense_, stream);
    }
    profile::Range r("sparse_arch", stream);
    sparse_arch_->backward(grad_pooled_, stream);
}

void DeepFMModel::move_dense_to(Device device) {
    move_parameters(*dense_arch_, device);
    move_parameters(*deep_, device);
    if (over_arch_)
        move_parameters(*over_arch_, device);
    move_parameters(*over_final_, device);
}

std::vector<Parameter*> DeepFMModel::parameters() {
    std::vector<Parameter*> out;
    append_parameters(out, *dense_arch_);
    append_parameters(out, *deep_);
    if (over_arch_)
        append_parameters(out, *over_arch_);
    append_parameters(out, *over_final_);
    append_parameters(out, *sparse_arch_);  // position weights (tables own a fused optimizer)
    return out;
}

}  // namespace shardrec
