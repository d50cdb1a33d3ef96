#include "engine/modules/mlp.h"

#include "engine/modules/init.h"

namespace shardrec {

Perceptron::Perceptron(std::string name,
                       int64_t in_size,
                       int64_t out_size,
                       kernels::Activation activation,
                       uint64_t seed,
                       bool bias)
    : name_(std::move(name)), in_size_(in_size), out_size_(out_size), activation_(activation) {
    SR_CHECK(in_size >= 1 && out_size >= 1, "{}: Perceptron({}, {}) needs sizes >= 1", name_,
             in_size, out_size);
    const float bound = init::linear_bound(in_size);
    const std::string w_name = init::param_name(name_, "_linear.weight");
    weight_ = Parameter(w_name, init::uniform({out_size, in_size}, bound, seed, w_name));
    if (bias) {
        const std::string b_name = init::param_name(name_, "_linear.bias");
        bias_ = Parameter(b_name, init::uniform({out_size}, bound, seed, b_name));
    }
}

std::vector<Parameter*> Perceptron::parameters() {
    if (!bias_.value.defined()) {
        return {&weight_};
    }
    return {&weight_, &bias_};
}

const Tensor& Perceptron::forward_impl(const Tensor& x, Stream& stream) {
    SR_CHECK(x.dim() == 2 && x.size(1) == in_size_, "{}: input must be [B, {}], got {}", name_,
             in_size_, x.str());
    input_ = x;
    init::reuse_or_allocate(output_, {x.size(0), out_size_}, x.device());
    kernels::refresh_gemm_weight(weight_.value);  // bf16 math: rounded once for fwd + bwd
    input_bf16_ = kernels::Bf16ActivationCopy(x);
    kernels::linear_forward(x, weight_.value, bias_.value.defined() ? &bias_.value : nullptr,
                            activation_, output_, stream);
    return output_;
}

const Tensor& Perceptron::backward_impl(const Tensor& grad_out, Stream& stream) {
    SR_CHECK(input_.defined(), "{}: backward before forward", name_);
    init::reuse_or_allocate(grad_input_, input_.shape(), input_.device());
    kernels::linear_backward(input_, weight_.value, output_, grad_out, activation_, &grad_input_,
                             weight_.grad, bias_.value.defined() ? &bias_.grad : nullptr, stream);
    input_bf16_ = {};
    return grad_input_;
}

MLP::MLP(std::string name,
         int64_t in_size,
         const std::vector<int64_t>& layer_sizes,
         kernels::Activation activation,
         uint64_t seed)
    : in_size_(in_size) {
    SR_CHECK(!layer_sizes.empty(), "{}: MLP needs at least one layer", name);
    int64_t in = in_size;
    for (size_t i = 0; i < layer_sizes.size(); ++i) {
        layers_.push_back(
            std::make_unique<Perceptron>(init::param_name(name, "_mlp." + std::to_string(i)), in,
                                         layer_sizes[i], activation, seed));
        in = layer_sizes[i];
    }
}

std::vector<Parameter*> MLP::parameters() {
    std::vector<Parameter*> out;
    for (auto& layer : layers_) {
        append_parameters(out, *layer);
    }
    return out;
}

const Tensor& MLP::forward_impl(const Tensor& x, Stream& stream) {
    const Tensor* h = &x;
    for (auto& layer : layers_) {
        h = &layer->forward(*h, stream);
    }
    return *h;
}

const Tensor& MLP::backward_impl(const Tensor& grad_out, Stream& stream) {
    const Tensor* g = &grad_out;
    for (size_t i = layers_.size(); i-- > 0;) {
        g = &layers_[i]->backward(*g, stream);
    }
    return *g;
}

}  // namespace shardrec
