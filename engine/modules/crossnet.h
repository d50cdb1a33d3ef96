// TorchRec's cross networks as explicit forward/backward modules over [B, N] -> [B, N], one
// kernel call per layer (kernels/crossnet.h, vector_crossnet.h, mixture_crossnet.h):
//   CrossNet (F1), LowRankCrossNet (F2), VectorCrossNet (F3, bias outside the product as in
//   TorchRec's implementation), LowRankMixtureCrossNet (F4, softmax gate shared by the layers).
// Each keeps its per-layer outputs and saved values for backward, reused while B is unchanged.
// Kernels ~ U(+-1/sqrt(fan_in)) keyed by (seed, name) where TorchRec uses xavier_normal; biases 0
// as in TorchRec. Parameter names are TorchRec's ("<name>.W_kernels.0", "<name>.bias.0", ...).
#pragma once

#include <string>
#include <vector>

#include "engine/modules/module.h"
#include "kernels/linear.h"

namespace shardrec {

// Per-layer buffers shared by the cross nets: outputs and the backward ping-pong gradients.
struct CrossNetBuffers {
    Tensor input;                 // handle to the latest forward's input (x0)
    std::vector<Tensor> out;      // [L] x [B, N]
    Tensor grad_input;            // [B, N]: the accumulated gradient wrt x0, returned by backward
    Tensor grad_ping, grad_pong;  // [B, N]: gradients wrt the inner layers' inputs
    // [L]: bf16 math, each layer's input rounded once for the GEMMs of its forward and backward
    // (the layers whose GEMMs read their input keep it; released by the backward)
    std::vector<kernels::Bf16ActivationCopy> xl_bf16;
};

class CrossNet : public DenseModule {
public:
    CrossNet(std::string name, int64_t in_features, int64_t num_layers, uint64_t seed = 0);
    std::vector<Parameter*> parameters() override;

    int64_t out_features() const override { return in_; }

protected:
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    std::string name_;
    int64_t in_;
    std::vector<Parameter> kernels_, bias_;  // [N, N] and [N] per layer
    CrossNetBuffers buf_;
    std::vector<Tensor> u_;  // saved gates per layer
};

class LowRankCrossNet : public DenseModule {
public:
    LowRankCrossNet(std::string name,
                    int64_t in_features,
                    int64_t num_layers,
                    int64_t low_rank,
                    uint64_t seed = 0);
    std::vector<Parameter*> parameters() override;

    int64_t out_features() const override { return in_; }

protected:
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    std::string name_;
    int64_t in_, low_rank_;
    std::vector<Parameter> w_, v_, bias_;  // W_kernels [N, r], V_kernels [r, N], bias [N]
    CrossNetBuffers buf_;
    std::vector<Tensor> u_, vx_;
};

class VectorCrossNet : public DenseModule {
public:
    VectorCrossNet(std::string name, int64_t in_features, int64_t num_layers, uint64_t seed = 0);
    std::vector<Parameter*> parameters() override;

    int64_t out_features() const override { return in_; }

protected:
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    std::string name_;
    int64_t in_;
    std::vector<Parameter> kernels_, bias_;  // [N] and [N] per layer (TorchRec kernels [N, 1])
    CrossNetBuffers buf_;
    std::vector<Tensor> s_;  // saved dots [B] per layer
};

class LowRankMixtureCrossNet : public DenseModule {
public:
    LowRankMixtureCrossNet(std::string name,
                           int64_t in_features,
                           int64_t num_layers,
                           int64_t num_experts = 1,
                           int64_t low_rank = 1,
                           kernels::Activation activation = kernels::Activation::kRelu,
                           uint64_t seed = 0);
    std::vector<Parameter*> parameters() override;

    int64_t out_features() const override { return in_; }

protected:
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    std::string name_;
    int64_t in_, num_experts_, low_rank_;
    kernels::Activation activation_;
    std::vector<Parameter> u_, v_, bias_, c_;  // per layer: [K, N, r], [K, r, N], [N], [K, r, r]
    Tensor gates_, gates_grad_;                // [K, N]; K > 1 only
    std::vector<Parameter> gate_params_;       // gates.<k>.weight: [1, N] views of gates_
    CrossNetBuffers buf_;
    std::vector<Tensor> a1_, a2_, e_, probs_;  // saved per layer
};

}  // namespace shardrec
