// SwishLayerNorm forward/backward: argument checks (all of them, once) and the device switch.
#include "kernels/swish_layer_norm.h"

#include <utility>

namespace shardrec::kernels {
namespace {

void check_f32(const Tensor& t, const char* name, const Shape& want, Device device) {
    SR_CHECK(t.defined(), "{} is undefined", name);
    SR_CHECK(t.dtype() == DType::kF32, "{} must be f32, got {}", name, t.str());
    SR_CHECK(t.shape() == want, "{} must be {}, got {}", name, shape_str(want), t.str());
    SR_CHECK(t.device() == device, "{} is on {}, expected {}", name, t.device().str(),
             device.str());
}

// Returns {R, N} after checking x [R, N], gamma [N], beta [N], mean [R], rstd [R].
std::pair<int64_t, int64_t> check_common(const Tensor& x,
                                         const Tensor& gamma,
                                         const Tensor& beta,
                                         const Tensor& mean,
                                         const Tensor& rstd) {
    SR_CHECK(x.dim() == 2 && x.size(0) >= 1 && x.size(1) >= 1,
             "swish_layer_norm: x must be [R, N] with R, N >= 1, got {}", x.str());
    const int64_t R = x.size(0), N = x.size(1);
    const Device dev = x.device();
    check_f32(x, "x", {R, N}, dev);
    check_f32(gamma, "gamma", {N}, dev);
    check_f32(beta, "beta", {N}, dev);
    check_f32(mean, "mean", {R}, dev);
    check_f32(rstd, "rstd", {R}, dev);
    return {R, N};
}

}  // namespace

void swish_layer_norm_forward(const Tensor& x,
                              const Tensor& gamma,
                              const Tensor& beta,
                              float eps,
                              Tensor& y,
                              Tensor& mean,
                              Tensor& rstd,
                              Stream& stream) {
    const auto [R, N] = check_common(x, gamma, beta, mean, rstd);
    check_f32(y, "y", {R, N}, x.device());
    SR_CHECK(eps > 0.0f, "swish_layer_norm: eps must be > 0, got {}", eps);
    SR_CHECK(y.data_ptr() != x.data_ptr(), "swish_layer_norm_forward: y must not alias x");
    switch (x.device().type) {
        case DeviceType::kCpu:
            return cpu::swish_layer_norm_forward(x, gamma, beta, eps, y, mean, rstd);
        case DeviceType::kCuda:
            return cuda::swish_layer_norm_forward(x, gamma, beta, eps, y, mean, rstd, stream);
    }
}

void swish_layer_norm_backward(const Tensor& x,
                               const Tensor& gamma,
                               const Tensor& beta,
                               const Tensor& mean,
                               const Tensor& rstd,
                               const Tensor& grad_y,
                               Tensor& grad_x,
                               Tensor& grad_gamma,
                               Tensor& grad_beta,
                               Stream& stream) {
    const auto [R, N] = check_common(x, gamma, beta, mean, rstd);
    const Device dev = x.device();
    check_f32(grad_y, "grad_y", {R, N}, dev);
    check_f32(grad_x, "grad_x", {R, N}, dev);
    check_f32(grad_gamma, "grad_gamma", {N}, dev);
    check_f32(grad_beta, "grad_beta", {N}, dev);
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::swish_layer_norm_backward(x, gamma, beta, mean, rstd, grad_y, grad_x,
                                                  grad_gamma, grad_beta);
        case DeviceType::kCuda:
            return cuda::swish_layer_norm_backward(x, gamma, beta, mean, rstd, grad_y, grad_x,
                                                   grad_gamma, grad_beta, stream);
    }
}

}  // namespace shardrec::kernels
