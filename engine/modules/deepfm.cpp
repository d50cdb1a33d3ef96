#include "engine/modules/deepfm.h"

#include "engine/modules/init.h"
#include "engine/modules/interaction.h"
#include "kernels/factorization_machine.h"

namespace shardrec {

// ---- EmbeddingConcat ----

const Tensor& EmbeddingConcat::concat(const std::vector<Tensor>& embeddings, Stream& stream) {
    SR_CHECK(!embeddings.empty(), "DeepFM/FM: no embeddings to concatenate");
    const int64_t B = embeddings.front().dim() >= 1 ? embeddings.front().size(0) : 0;
    int64_t width = 0;
    shapes_.clear();
    for (const Tensor& e : embeddings) {
        SR_CHECK(e.dim() >= 2 && e.size(0) == B,
                 "DeepFM/FM: embeddings must be [B={}, ...], got {}", B, e.str());
        shapes_.push_back(e.shape());
        width += e.numel() / B;
    }
    init::reuse_or_allocate(buffer_, {B, width}, embeddings.front().device());
    int64_t col = 0;
    for (const Tensor& e : embeddings) {
        const int64_t w = e.numel() / B;
        copy_into_columns(buffer_, col, e.view({B, w}), stream);  // flatten(e) = e.view(B, -1)
        col += w;
    }
    return buffer_;
}

const std::vector<Tensor>& EmbeddingConcat::split(const Tensor& grad, Stream& stream) {
    SR_CHECK(!shapes_.empty(), "DeepFM/FM: input_grads() needs a forward on a list of embeddings");
    grads_.resize(shapes_.size());
    const int64_t B = grad.size(0);
    int64_t col = 0;
    for (size_t i = 0; i < shapes_.size(); ++i) {
        const int64_t w = shape_numel(shapes_[i]) / B;
        init::reuse_or_allocate(grads_[i], shapes_[i], grad.device());
        Tensor flat = grads_[i].view({B, w});
        copy_from_columns(flat, grad, col, stream);
        col += w;
    }
    return grads_;
}

// ---- FactorizationMachine ----

const Tensor& FactorizationMachine::forward(const std::vector<Tensor>& embeddings, Stream& stream) {
    return forward_impl(concat_.concat(embeddings, stream), stream);
}

const Tensor& FactorizationMachine::forward_impl(const Tensor& x, Stream& stream) {
    SR_CHECK(x.dim() == 2, "FactorizationMachine: input must be [B, N], got {}", x.str());
    input_ = x;
    init::reuse_or_allocate(output_, {x.size(0), 1}, x.device());
    kernels::factorization_machine_forward(x, output_, stream);
    return output_;
}

const Tensor& FactorizationMachine::backward_impl(const Tensor& grad_out, Stream& stream) {
    SR_CHECK(input_.defined(), "FactorizationMachine: backward before forward");
    init::reuse_or_allocate(grad_input_, input_.shape(), input_.device());
    kernels::factorization_machine_backward(input_, grad_out, grad_input_, stream);
    return grad_input_;
}

const std::vector<Tensor>& FactorizationMachine::input_grads(Stream& stream) {
    SR_CHECK(grad_input_.defined(), "FactorizationMachine: input_grads() before backward");
    return concat_.split(grad_input_, stream);
}

// ---- DeepFM ----

DeepFM::DeepFM(std::unique_ptr<DenseModule> dense_module) : dense_module_(std::move(dense_module)) {
    SR_CHECK(dense_module_ != nullptr, "DeepFM: dense_module is null");
}

const Tensor& DeepFM::forward(const std::vector<Tensor>& embeddings, Stream& stream) {
    return forward_impl(concat_.concat(embeddings, stream), stream);
}

const Tensor& DeepFM::forward_impl(const Tensor& x, Stream& stream) {
    return dense_module_->forward(x, stream);
}

const Tensor& DeepFM::backward_impl(const Tensor& grad_out, Stream& stream) {
    grad_input_ = &dense_module_->backward(grad_out, stream);
    return *grad_input_;
}

const std::vector<Tensor>& DeepFM::input_grads(Stream& stream) {
    SR_CHECK(grad_input_ != nullptr, "DeepFM: input_grads() before backward");
    return concat_.split(*grad_input_, stream);
}

}  // namespace shardrec
