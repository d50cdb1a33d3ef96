#include "engine/modules/swish_layer_norm.h"

#include "engine/modules/init.h"
#include "kernels/swish_layer_norm.h"

namespace shardrec {

SwishLayerNorm::SwishLayerNorm(std::string name, int64_t num_features)
    : name_(std::move(name)), num_features_(num_features) {
    SR_CHECK(num_features >= 1, "{}: SwishLayerNorm needs num_features >= 1", name_);
    gamma_ =
        Parameter(init::param_name(name_, "norm.0.weight"), init::constant({num_features}, 1.0f));
    beta_ = Parameter(init::param_name(name_, "norm.0.bias"), init::constant({num_features}, 0.0f));
}

const Tensor& SwishLayerNorm::forward_impl(const Tensor& x, Stream& stream) {
    SR_CHECK(x.dim() >= 1 && x.size(-1) == num_features_, "{}: input must end in {}, got {}", name_,
             num_features_, x.str());
    const int64_t R = x.numel() / num_features_;
    input_ = x.view({R, num_features_});
    init::reuse_or_allocate(output_, x.shape(), x.device());
    init::reuse_or_allocate(mean_, {R}, x.device());
    init::reuse_or_allocate(rstd_, {R}, x.device());
    Tensor y = output_.view({R, num_features_});
    kernels::swish_layer_norm_forward(input_, gamma_.value, beta_.value, kernels::kLayerNormEps, y,
                                      mean_, rstd_, stream);
    return output_;
}

const Tensor& SwishLayerNorm::backward_impl(const Tensor& grad_out, Stream& stream) {
    SR_CHECK(input_.defined(), "{}: backward before forward", name_);
    SR_CHECK(grad_out.shape() == output_.shape(), "{}: grad_out {} must match the output {}", name_,
             grad_out.str(), output_.str());
    init::reuse_or_allocate(grad_input_, output_.shape(), output_.device());
    Tensor gx = grad_input_.view(input_.shape());
    kernels::swish_layer_norm_backward(input_, gamma_.value, beta_.value, mean_, rstd_,
                                       grad_out.view(input_.shape()), gx, gamma_.grad, beta_.grad,
                                       stream);
    return grad_input_;
}

}  // namespace shardrec
