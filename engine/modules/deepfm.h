// TorchRec DeepFM (the deep part: dense_module over the concatenated, flattened embeddings) and
// FactorizationMachine (the FM part, F5: out [B, 1]). Each takes either the concatenation
// [B, N] (a KeyedTensor's values already is one) or the list of embeddings [B, n_i, d_i] (or
// [B, k]), which is flattened and concatenated into a reused buffer; after backward,
// input_grads() splits the gradient back into the inputs' shapes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/modules/module.h"

namespace shardrec {

// The flatten + concat of a list of [B, ...] tensors along dim 1, and the split of its gradient.
class EmbeddingConcat {
public:
    const Tensor& concat(const std::vector<Tensor>& embeddings, Stream& stream);
    // grad [B, sum] -> the inputs' shapes
    const std::vector<Tensor>& split(const Tensor& grad, Stream& stream);

private:
    std::vector<Shape> shapes_;
    Tensor buffer_;
    std::vector<Tensor> grads_;
};

class FactorizationMachine : public DenseModule {
public:
    FactorizationMachine() = default;

    using DenseModule::forward;

    const Tensor& forward(const std::vector<Tensor>& embeddings, Stream& stream = Stream::cpu());

    // The gradient wrt each input of the latest list forward, after backward.
    const std::vector<Tensor>& input_grads(Stream& stream = Stream::cpu());

    int64_t out_features() const override { return 1; }

protected:
    // x [B, N] -> [B, 1]; x must stay unchanged until backward.
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    EmbeddingConcat concat_;
    Tensor input_, output_, grad_input_;
};

class DeepFM : public DenseModule {
public:
    // dense_module's input width is the concatenation's N (TorchRec: e.g. 2*64 + 2*32 = 192).
    explicit DeepFM(std::unique_ptr<DenseModule> dense_module);

    std::vector<Parameter*> parameters() override { return dense_module_->parameters(); }

    using DenseModule::forward;

    const Tensor& forward(const std::vector<Tensor>& embeddings, Stream& stream = Stream::cpu());

    const std::vector<Tensor>& input_grads(Stream& stream = Stream::cpu());

    int64_t out_features() const override { return dense_module_->out_features(); }

    DenseModule& dense_module() { return *dense_module_; }

protected:
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    std::unique_ptr<DenseModule> dense_module_;
    EmbeddingConcat concat_;
    const Tensor* grad_input_ = nullptr;
};

}  // namespace shardrec
