// Vector cross layer forward/backward: argument checks (all of them, once) and the device switch.
#include "kernels/vector_crossnet.h"

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

// Returns {B, N} after checking x0, xl [B, N] and w [N].
std::pair<int64_t, int64_t> check_layer(const Tensor& x0, const Tensor& xl, const Tensor& w) {
    SR_CHECK(x0.dim() == 2 && x0.size(0) >= 1 && x0.size(1) >= 1,
             "vector_crossnet: x0 must be [B, N] with B, N >= 1, got {}", x0.str());
    const int64_t B = x0.size(0), N = x0.size(1);
    check_f32(x0, "x0", {B, N}, x0.device());
    check_f32(xl, "xl", {B, N}, x0.device());
    check_f32(w, "w", {N}, x0.device());
    return {B, N};
}

}  // namespace

void vector_crossnet_forward(const Tensor& x0,
                             const Tensor& xl,
                             const Tensor& w,
                             const Tensor& bias,
                             Tensor& out,
                             Tensor& s,
                             Stream& stream) {
    const auto [B, N] = check_layer(x0, xl, w);
    const Device dev = x0.device();
    check_f32(bias, "bias", {N}, dev);
    check_f32(out, "out", {B, N}, dev);
    check_f32(s, "s", {B}, dev);
    SR_CHECK(out.data_ptr() != x0.data_ptr() && out.data_ptr() != xl.data_ptr(),
             "vector_crossnet_forward: out must not alias x0 or xl");
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::vector_crossnet_forward(x0, xl, w, bias, out, s);
        case DeviceType::kCuda:
            return cuda::vector_crossnet_forward(x0, xl, w, bias, out, s, stream);
    }
}

void vector_crossnet_backward(const Tensor& x0,
                              const Tensor& xl,
                              const Tensor& w,
                              const Tensor& s,
                              const Tensor& grad_out,
                              Tensor& grad_x0,
                              Tensor& grad_xl,
                              Tensor& grad_w,
                              Tensor& grad_b,
                              Stream& stream) {
    const auto [B, N] = check_layer(x0, xl, w);
    const Device dev = x0.device();
    check_f32(s, "s", {B}, dev);
    check_f32(grad_out, "grad_out", {B, N}, dev);
    check_f32(grad_x0, "grad_x0", {B, N}, dev);
    check_f32(grad_xl, "grad_xl", {B, N}, dev);
    check_f32(grad_w, "grad_w", {N}, dev);
    check_f32(grad_b, "grad_b", {N}, dev);
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::vector_crossnet_backward(x0, xl, w, s, grad_out, grad_x0, grad_xl, grad_w,
                                                 grad_b);
        case DeviceType::kCuda:
            return cuda::vector_crossnet_backward(x0, xl, w, s, grad_out, grad_x0, grad_xl, grad_w,
                                                  grad_b, stream);
    }
}

}  // namespace shardrec::kernels
