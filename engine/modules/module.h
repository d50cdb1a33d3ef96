// Module: explicit forward and backward, no autograd tape (tiny-cuda-nn). A module keeps what its
// backward needs from the latest forward; one batch is in flight per module at a time. Dense
// parameters carry their gradient next to their value and a TorchRec-style dotted name
// ("over_arch.layers.0.weight") used by checkpoints, exports and the optimizer.
#pragma once

#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace shardrec {

struct Parameter {
    std::string name;
    Tensor value;
    Tensor grad;  // same shape; written (not accumulated) by each backward

    Parameter() = default;

    Parameter(std::string n, Tensor v)
        : name(std::move(n)), value(std::move(v)), grad(Tensor::zeros(value.shape(), value.dtype(),
                                                                      value.device())) {}
};

class Module {
public:
    virtual ~Module() = default;
    // Dense parameters (not embedding tables, which own their fused optimizer), in a fixed order.
    virtual std::vector<Parameter*> parameters() { return {}; }
};

// Prefixes every parameter name of `children` with `prefix.` and appends them to `out`.
void append_parameters(std::vector<Parameter*>& out, Module& child);

}  // namespace shardrec
