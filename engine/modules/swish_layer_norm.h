// TorchRec SwishLayerNorm: Y = X * sigmoid(LayerNorm(X)), normalised over the trailing
// `num_features` values (TorchRec's input_dims, flattened) with learnable gamma (1) and beta (0),
// eps 1e-5. Parameter names are TorchRec's: "<name>.norm.0.weight", "<name>.norm.0.bias".
#pragma once

#include <string>
#include <vector>

#include "engine/modules/module.h"

namespace shardrec {

class SwishLayerNorm : public DenseModule {
public:
    SwishLayerNorm(std::string name, int64_t num_features);

    std::vector<Parameter*> parameters() override { return {&gamma_, &beta_}; }

    int64_t out_features() const override { return num_features_; }

protected:
    // x [..., num_features] (numel a multiple of num_features) -> the same shape. x must stay
    // unchanged until backward.
    const Tensor& forward_impl(const Tensor& x, Stream& stream) override;
    const Tensor& backward_impl(const Tensor& grad_out, Stream& stream) override;

private:
    std::string name_;
    int64_t num_features_;
    Parameter gamma_, beta_;
    Tensor input_;  // [R, N] view of the latest input
    Tensor output_, mean_, rstd_, grad_input_;
};

}  // namespace shardrec
