// Module: explicit forward and backward, no autograd tape (tiny-cuda-nn). A module keeps what its
// backward needs from the latest forward; one batch is in flight per module at a time. Dense
// parameters carry their gradient next to their value and a TorchRec-style dotted name
// ("over_arch.layers.0.weight") used by checkpoints, exports and the optimizer.
#pragma once

#include <string>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec {

struct Parameter {
    std::string name;
    Tensor value;
    Tensor grad;  // same shape; written (not accumulated) by each backward

    Parameter() = default;

    Parameter(std::string n, Tensor v)
        : name(std::move(n)),
          value(std::move(v)),
          grad(Tensor::zeros(value.shape(), value.dtype(), value.device())) {}
};

class Module {
public:
    virtual ~Module() = default;

    // Dense parameters (not embedding tables, which own their fused optimizer), in a fixed order.
    virtual std::vector<Parameter*> parameters() { return {}; }
};

// A module from one dense tensor to another (Perceptron, MLP, the cross nets, SwishLayerNorm,
// FactorizationMachine): what DeepFM and the models compose. Public entries are non-virtual and
// call the *_impl of the concrete module (tiny-cuda-nn).
class DenseModule : public Module {
public:
    // Output valid until the next forward; its buffer is reused while the input shape is
    // unchanged.
    const Tensor& forward(const Tensor& x, Stream& stream = Stream::cpu()) {
        return forward_impl(x, stream);
    }

    // d loss / d input of the latest forward, from d loss / d output; writes every
    // Parameter::grad (not accumulated).
    const Tensor& backward(const Tensor& grad_out, Stream& stream = Stream::cpu()) {
        return backward_impl(grad_out, stream);
    }

    virtual int64_t out_features() const = 0;

protected:
    virtual const Tensor& forward_impl(const Tensor& x, Stream& stream) = 0;
    virtual const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) = 0;
};

// Appends the parameters of `child` to `out`.
void append_parameters(std::vector<Parameter*>& out, Module& child);

// Moves every parameter of `m` (value and gradient) to `device`; the values are copied.
void move_parameters(Module& m, Device device);

}  // namespace shardrec
