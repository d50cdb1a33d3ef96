// The cross nets: one skeleton for the layer loops (forward keeps every layer's output; backward
// walks the layers in reverse, ping-ponging the gradient wrt each layer's input, and accumulates
// the gradient wrt x0 across layers), and per module the kernel call of one layer.
#include "engine/modules/crossnet.h"

#include "engine/modules/init.h"
#include "kernels/crossnet.h"
#include "kernels/mixture_crossnet.h"
#include "kernels/vector_crossnet.h"

namespace shardrec {
namespace {

void check_input(const std::string& name, const Tensor& x, int64_t in) {
    SR_CHECK(x.dim() == 2 && x.size(1) == in, "{}: input must be [B, {}], got {}", name, in,
             x.str());
}

// layer(l, xl, out_l) runs forward layer l.
template <typename Layer>
const Tensor& cross_forward(CrossNetBuffers& b, size_t num_layers, const Tensor& x, Layer&& layer) {
    b.input = x;
    b.out.resize(num_layers);
    b.xl_bf16.resize(num_layers);
    for (size_t l = 0; l < num_layers; ++l) {
        const Tensor& xl = l == 0 ? x : b.out[l - 1];
        layer(l, xl, init::reuse_or_allocate(b.out[l], x.shape(), x.device()));
    }
    return b.out.back();
}

// layer(l, xl, grad_out_l, grad_xl) runs backward layer l; at layer 0 grad_xl IS the x0
// accumulator (the kernels allow that alias), so it ends holding the whole input gradient.
template <typename Layer>
const Tensor& cross_backward(
    CrossNetBuffers& b, size_t num_layers, const Tensor& grad_out, Stream& stream, Layer&& layer) {
    SR_CHECK(b.input.defined(), "cross net: backward before forward");
    const Shape& shape = b.input.shape();
    const Device device = b.input.device();
    init::reuse_or_allocate(b.grad_input, shape, device).zero_(stream);
    if (num_layers > 1) {
        init::reuse_or_allocate(b.grad_ping, shape, device);
        init::reuse_or_allocate(b.grad_pong, shape, device);
    }
    const Tensor* g = &grad_out;
    for (size_t l = num_layers; l-- > 0;) {
        Tensor& grad_xl = l == 0 ? b.grad_input : (l % 2 == 1 ? b.grad_ping : b.grad_pong);
        layer(l, l == 0 ? b.input : b.out[l - 1], *g, grad_xl);
        g = &grad_xl;
        b.xl_bf16[l] = {};
    }
    return b.grad_input;
}

Parameter uniform_param(const std::string& name,
                        const Shape& shape,
                        int64_t fan_in,
                        uint64_t seed) {
    return Parameter(name, init::uniform(shape, init::linear_bound(fan_in), seed, name));
}

Parameter zero_param(const std::string& name, const Shape& shape) {
    return Parameter(name, Tensor::zeros(shape, DType::kF32));
}

std::string layer_name(const std::string& prefix, const char* list, size_t l) {
    return init::param_name(prefix, std::string(list) + "." + std::to_string(l));
}

void append(std::vector<Parameter*>& out, std::vector<Parameter>& params) {
    for (Parameter& p : params) {
        out.push_back(&p);
    }
}

}  // namespace

// ---- CrossNet ----

CrossNet::CrossNet(std::string name, int64_t in_features, int64_t num_layers, uint64_t seed)
    : name_(std::move(name)), in_(in_features) {
    SR_CHECK(in_features >= 1 && num_layers >= 1, "{}: CrossNet({}, {})", name_, in_features,
             num_layers);
    for (int64_t l = 0; l < num_layers; ++l) {
        kernels_.push_back(uniform_param(layer_name(name_, "kernels", l), {in_, in_}, in_, seed));
        bias_.push_back(zero_param(layer_name(name_, "bias", l), {in_}));
    }
    u_.resize(kernels_.size());
}

std::vector<Parameter*> CrossNet::parameters() {
    std::vector<Parameter*> out;
    append(out, kernels_);
    append(out, bias_);
    return out;
}

const Tensor& CrossNet::forward_impl(const Tensor& x, Stream& stream) {
    check_input(name_, x, in_);
    return cross_forward(buf_, kernels_.size(), x, [&](size_t l, const Tensor& xl, Tensor& out) {
        init::reuse_or_allocate(u_[l], x.shape(), x.device());
        kernels::refresh_gemm_weight(kernels_[l].value);  // bf16 math: once for fwd + bwd
        buf_.xl_bf16[l] = kernels::Bf16ActivationCopy(xl);
        kernels::crossnet_forward(x, xl, kernels_[l].value, nullptr, bias_[l].value, out, u_[l],
                                  nullptr, stream);
    });
}

const Tensor& CrossNet::backward_impl(const Tensor& grad_out, Stream& stream) {
    return cross_backward(buf_, kernels_.size(), grad_out, stream,
                          [&](size_t l, const Tensor& xl, const Tensor& g, Tensor& grad_xl) {
                              kernels::crossnet_backward(buf_.input, xl, kernels_[l].value, nullptr,
                                                         u_[l], nullptr, g, buf_.grad_input,
                                                         grad_xl, kernels_[l].grad, nullptr,
                                                         bias_[l].grad, stream);
                          });
}

// ---- LowRankCrossNet ----

LowRankCrossNet::LowRankCrossNet(
    std::string name, int64_t in_features, int64_t num_layers, int64_t low_rank, uint64_t seed)
    : name_(std::move(name)), in_(in_features), low_rank_(low_rank) {
    SR_CHECK(in_features >= 1 && num_layers >= 1 && low_rank >= 1,
             "{}: LowRankCrossNet({}, {}, low_rank={})", name_, in_features, num_layers, low_rank);
    for (int64_t l = 0; l < num_layers; ++l) {
        w_.push_back(
            uniform_param(layer_name(name_, "W_kernels", l), {in_, low_rank_}, low_rank_, seed));
        v_.push_back(uniform_param(layer_name(name_, "V_kernels", l), {low_rank_, in_}, in_, seed));
        bias_.push_back(zero_param(layer_name(name_, "bias", l), {in_}));
    }
    u_.resize(w_.size());
    vx_.resize(w_.size());
}

std::vector<Parameter*> LowRankCrossNet::parameters() {
    std::vector<Parameter*> out;
    append(out, w_);
    append(out, v_);
    append(out, bias_);
    return out;
}

const Tensor& LowRankCrossNet::forward_impl(const Tensor& x, Stream& stream) {
    check_input(name_, x, in_);
    return cross_forward(buf_, w_.size(), x, [&](size_t l, const Tensor& xl, Tensor& out) {
        init::reuse_or_allocate(u_[l], x.shape(), x.device());
        init::reuse_or_allocate(vx_[l], {x.size(0), low_rank_}, x.device());
        kernels::refresh_gemm_weight(w_[l].value);  // bf16 math: once for fwd + bwd
        kernels::refresh_gemm_weight(v_[l].value);
        buf_.xl_bf16[l] = kernels::Bf16ActivationCopy(xl);
        kernels::crossnet_forward(x, xl, w_[l].value, &v_[l].value, bias_[l].value, out, u_[l],
                                  &vx_[l], stream);
    });
}

const Tensor& LowRankCrossNet::backward_impl(const Tensor& grad_out, Stream& stream) {
    return cross_backward(buf_, w_.size(), grad_out, stream,
                          [&](size_t l, const Tensor& xl, const Tensor& g, Tensor& grad_xl) {
                              kernels::crossnet_backward(buf_.input, xl, w_[l].value, &v_[l].value,
                                                         u_[l], &vx_[l], g, buf_.grad_input,
                                                         grad_xl, w_[l].grad, &v_[l].grad,
                                                         bias_[l].grad, stream);
                          });
}

// ---- VectorCrossNet ----

VectorCrossNet::VectorCrossNet(std::string name,
                               int64_t in_features,
                               int64_t num_layers,
                               uint64_t seed)
    : name_(std::move(name)), in_(in_features) {
    SR_CHECK(in_features >= 1 && num_layers >= 1, "{}: VectorCrossNet({}, {})", name_, in_features,
             num_layers);
    for (int64_t l = 0; l < num_layers; ++l) {
        kernels_.push_back(uniform_param(layer_name(name_, "kernels", l), {in_}, in_, seed));
        bias_.push_back(zero_param(layer_name(name_, "bias", l), {in_}));
    }
    s_.resize(kernels_.size());
}

std::vector<Parameter*> VectorCrossNet::parameters() {
    std::vector<Parameter*> out;
    append(out, kernels_);
    append(out, bias_);
    return out;
}

const Tensor& VectorCrossNet::forward_impl(const Tensor& x, Stream& stream) {
    check_input(name_, x, in_);
    return cross_forward(buf_, kernels_.size(), x, [&](size_t l, const Tensor& xl, Tensor& out) {
        init::reuse_or_allocate(s_[l], {x.size(0)}, x.device());
        kernels::vector_crossnet_forward(x, xl, kernels_[l].value, bias_[l].value, out, s_[l],
                                         stream);
    });
}

const Tensor& VectorCrossNet::backward_impl(const Tensor& grad_out, Stream& stream) {
    return cross_backward(buf_, kernels_.size(), grad_out, stream,
                          [&](size_t l, const Tensor& xl, const Tensor& g, Tensor& grad_xl) {
                              kernels::vector_crossnet_backward(
                                  buf_.input, xl, kernels_[l].value, s_[l], g, buf_.grad_input,
                                  grad_xl, kernels_[l].grad, bias_[l].grad, stream);
                          });
}

// ---- LowRankMixtureCrossNet ----

LowRankMixtureCrossNet::LowRankMixtureCrossNet(std::string name,
                                               int64_t in_features,
                                               int64_t num_layers,
                                               int64_t num_experts,
                                               int64_t low_rank,
                                               kernels::Activation activation,
                                               uint64_t seed)
    : name_(std::move(name)),
      in_(in_features),
      num_experts_(num_experts),
      low_rank_(low_rank),
      activation_(activation) {
    SR_CHECK(in_features >= 1 && num_layers >= 1 && num_experts >= 1 && low_rank >= 1,
             "{}: LowRankMixtureCrossNet({}, {}, num_experts={}, low_rank={})", name_, in_features,
             num_layers, num_experts, low_rank);
    const int64_t K = num_experts_, N = in_, r = low_rank_;
    for (int64_t l = 0; l < num_layers; ++l) {
        u_.push_back(uniform_param(layer_name(name_, "U_kernels", l), {K, N, r}, r, seed));
        v_.push_back(uniform_param(layer_name(name_, "V_kernels", l), {K, r, N}, N, seed));
        bias_.push_back(zero_param(layer_name(name_, "bias", l), {N}));
        c_.push_back(uniform_param(layer_name(name_, "C_kernels", l), {K, r, r}, r, seed));
    }
    if (K > 1) {
        // TorchRec: gates[k] = Linear(N, 1, bias=False), one per expert, shared by all layers;
        // kept as one [K, N] tensor (what the kernel reads) with a [1, N] Parameter view each.
        gates_ = Tensor::empty({K, N}, DType::kF32);
        gates_grad_ = Tensor::zeros({K, N}, DType::kF32);
        for (int64_t k = 0; k < K; ++k) {
            Parameter p;
            p.name = init::param_name(name_, "gates." + std::to_string(k) + ".weight");
            p.value = gates_.slice(k, k + 1);
            p.grad = gates_grad_.slice(k, k + 1);
            p.value.copy_from(init::uniform({1, N}, init::linear_bound(N), seed, p.name));
            gate_params_.push_back(std::move(p));
        }
    }
    a1_.resize(u_.size());
    a2_.resize(u_.size());
    e_.resize(u_.size());
    probs_.resize(u_.size());
}

std::vector<Parameter*> LowRankMixtureCrossNet::parameters() {
    std::vector<Parameter*> out;
    append(out, u_);
    append(out, v_);
    append(out, bias_);
    append(out, gate_params_);
    append(out, c_);
    return out;
}

const Tensor& LowRankMixtureCrossNet::forward_impl(const Tensor& x, Stream& stream) {
    check_input(name_, x, in_);
    const int64_t B = x.size(0), K = num_experts_;
    return cross_forward(buf_, u_.size(), x, [&](size_t l, const Tensor& xl, Tensor& out) {
        init::reuse_or_allocate(a1_[l], {B, K, low_rank_}, x.device());
        init::reuse_or_allocate(a2_[l], {B, K, low_rank_}, x.device());
        init::reuse_or_allocate(e_[l], {B, K, in_}, x.device());
        if (K > 1) {
            init::reuse_or_allocate(probs_[l], {B, K}, x.device());
        }
        const kernels::MixtureCrossNetWeights w{&u_[l].value, &c_[l].value, &v_[l].value,
                                                &bias_[l].value, K > 1 ? &gates_ : nullptr};
        for (const Tensor* t : {w.u, w.c, w.v, w.gates}) {  // bf16 math: once for fwd + bwd
            if (t != nullptr) {
                kernels::refresh_gemm_weight(*t);
            }
        }
        kernels::mixture_crossnet_forward(x, xl, w, activation_, out,
                                          {&a1_[l], &a2_[l], &e_[l], K > 1 ? &probs_[l] : nullptr},
                                          stream);
    });
}

const Tensor& LowRankMixtureCrossNet::backward_impl(const Tensor& grad_out, Stream& stream) {
    const int64_t K = num_experts_;
    if (K > 1) {
        gates_grad_.zero_(stream);  // accumulated over the layers
    }
    return cross_backward(buf_, u_.size(), grad_out, stream,
                          [&](size_t l, const Tensor& xl, const Tensor& g, Tensor& grad_xl) {
                              const kernels::MixtureCrossNetWeights w{&u_[l].value, &c_[l].value,
                                                                      &v_[l].value, &bias_[l].value,
                                                                      K > 1 ? &gates_ : nullptr};
                              const kernels::MixtureCrossNetSaved saved{
                                  &a1_[l], &a2_[l], &e_[l], K > 1 ? &probs_[l] : nullptr};
                              kernels::mixture_crossnet_backward(
                                  buf_.input, xl, w, activation_, saved, g,
                                  {&buf_.grad_input, &grad_xl, &u_[l].grad, &c_[l].grad,
                                   &v_[l].grad, &bias_[l].grad, K > 1 ? &gates_grad_ : nullptr},
                                  stream);
                          });
}

}  // namespace shardrec
