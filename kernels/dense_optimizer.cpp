// Dense optimizer updates: argument checks (all of them, once) and the device switch.
#include "kernels/dense_optimizer.h"

#include <cmath>

namespace shardrec::kernels {
namespace {

void check_like(const Tensor& t, const char* name, const Tensor& param) {
    SR_CHECK(t.defined(), "{} is undefined", name);
    SR_CHECK(t.dtype() == DType::kF32, "{} must be f32, got {}", name, t.str());
    SR_CHECK(t.shape() == param.shape(), "{} {} must match param {}", name, t.str(), param.str());
    SR_CHECK(t.device() == param.device(), "{} is on {}, param on {}", name, t.device().str(),
             param.device().str());
}

void check_param(const Tensor& param, const Tensor& grad, float lr, float weight_decay) {
    check_like(param, "param", param);
    check_like(grad, "grad", param);
    SR_CHECK(param.data_ptr() != grad.data_ptr(), "optimizer: grad must not alias param");
    SR_CHECK(std::isfinite(lr) && lr >= 0.0f, "optimizer: lr must be finite and >= 0, got {}", lr);
    SR_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0f,
             "optimizer: weight_decay must be finite and >= 0, got {}", weight_decay);
}

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, float lr, float weight_decay, Stream& stream) {
    check_param(param, grad, lr, weight_decay);
    switch (param.device().type) {
        case DeviceType::kCpu:
            return cpu::sgd_update(param, grad, lr, weight_decay);
        case DeviceType::kCuda:
            return cuda::sgd_update(param, grad, lr, weight_decay, stream);
    }
}

void adagrad_update(Tensor& param,
                    const Tensor& grad,
                    Tensor& state_sum,
                    float lr,
                    float eps,
                    float weight_decay,
                    Stream& stream) {
    check_param(param, grad, lr, weight_decay);
    check_like(state_sum, "state_sum", param);
    SR_CHECK(eps > 0.0f, "adagrad: eps must be > 0, got {}", eps);
    switch (param.device().type) {
        case DeviceType::kCpu:
            return cpu::adagrad_update(param, grad, state_sum, lr, eps, weight_decay);
        case DeviceType::kCuda:
            return cuda::adagrad_update(param, grad, state_sum, lr, eps, weight_decay, stream);
    }
}

void adam_update(Tensor& param,
                 const Tensor& grad,
                 Tensor& exp_avg,
                 Tensor& exp_avg_sq,
                 const AdamHyperParams& hp,
                 Stream& stream) {
    check_param(param, grad, hp.lr, hp.weight_decay);
    check_like(exp_avg, "exp_avg", param);
    check_like(exp_avg_sq, "exp_avg_sq", param);
    SR_CHECK(hp.step >= 1, "adam: step is 1-based, got {}", hp.step);
    SR_CHECK(hp.beta1 >= 0.0f && hp.beta1 < 1.0f && hp.beta2 >= 0.0f && hp.beta2 < 1.0f,
             "adam: betas must be in [0, 1), got {} {}", hp.beta1, hp.beta2);
    SR_CHECK(hp.eps > 0.0f, "adam: eps must be > 0, got {}", hp.eps);
    switch (param.device().type) {
        case DeviceType::kCpu:
            return cpu::adam_update(param, grad, exp_avg, exp_avg_sq, hp);
        case DeviceType::kCuda:
            return cuda::adam_update(param, grad, exp_avg, exp_avg_sq, hp, stream);
    }
}

}  // namespace shardrec::kernels
