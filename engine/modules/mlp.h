// TorchRec Perceptron and MLP: y = act(x W^T + b) per layer, the activation after EVERY layer
// including the last (TorchRec's MLP). Explicit forward/backward over kernels/linear.h; each
// layer keeps its output and gradient buffers and reuses them while the batch size is unchanged.
// Parameter names follow TorchRec: "<name>._linear.weight" [out, in], "<name>._linear.bias" [out],
// and an MLP's layers are "<name>._mlp.<i>".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/modules/module.h"
#include "kernels/linear.h"

namespace shardrec {

class Perceptron : public DenseModule {
public:
    // Weights and bias ~ U(+-1/sqrt(in_size)) (nn.Linear's default), keyed by (seed, name).
    Perceptron(std::string name,
               int64_t in_size,
               int64_t out_size,
               kernels::Activation activation,
               uint64_t seed,
               bool bias = true);

    std::vector<Parameter*> parameters() override;

    int64_t in_features() const { return in_size_; }

    int64_t out_features() const override { return out_size_; }

    Parameter& weight() { return weight_; }

    Parameter& bias() { return bias_; }  // undefined tensors when built without bias

protected:
    // x [B, in] f32; it must stay unchanged until backward (its handle is kept, not copied).
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    // grad_out [B, out] -> grad_x [B, in].
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    std::string name_;
    int64_t in_size_, out_size_;
    kernels::Activation activation_;
    Parameter weight_, bias_;
    Tensor input_;                            // handle to the latest forward's input
    kernels::Bf16ActivationCopy input_bf16_;  // bf16 math: input_ rounded once for fwd + bwd
    Tensor output_;                           // [B, out], reused
    Tensor grad_input_;                       // [B, in], reused
};

class MLP : public DenseModule {
public:
    // layer_sizes[i] is the width of layer i; layer i reads layer i-1 (or in_size).
    MLP(std::string name,
        int64_t in_size,
        const std::vector<int64_t>& layer_sizes,
        kernels::Activation activation,
        uint64_t seed);

    std::vector<Parameter*> parameters() override;

    int64_t in_features() const { return in_size_; }

    int64_t out_features() const override { return layers_.back()->out_features(); }

    size_t num_layers() const { return layers_.size(); }

    Perceptron& layer(size_t i) { return *layers_[i]; }

protected:
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    int64_t in_size_;
    std::vector<std::unique_ptr<Perceptron>> layers_;
};

}  // namespace shardrec
