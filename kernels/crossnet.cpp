// Cross layer (full and low rank) forward/backward: argument checks (all of them, once) and the
// device switch.
#include "kernels/crossnet.h"

namespace shardrec::kernels {
namespace {

void check_f32(const Tensor& t, const char* name, const Shape& want, Device device) {
    SR_CHECK(t.defined(), "{} is undefined", name);
    SR_CHECK(t.dtype() == DType::kF32, "{} must be f32, got {}", name, t.str());
    SR_CHECK(t.shape() == want, "{} must be {}, got {}", name, shape_str(want), t.str());
    SR_CHECK(t.device() == device, "{} is on {}, expected {}", name, t.device().str(),
             device.str());
}

struct CrossDims {
    int64_t B, N, r;  // r = 0 for full rank
};

CrossDims check_layer(const Tensor& x0, const Tensor& xl, const Tensor& w, const Tensor* v) {
    SR_CHECK(x0.dim() == 2 && x0.size(0) >= 1 && x0.size(1) >= 1,
             "crossnet: x0 must be [B, N] with B, N >= 1, got {}", x0.str());
    CrossDims d{x0.size(0), x0.size(1), 0};
    const Device dev = x0.device();
    check_f32(x0, "x0", {d.B, d.N}, dev);
    check_f32(xl, "xl", {d.B, d.N}, dev);
    if (v == nullptr) {
        check_f32(w, "w", {d.N, d.N}, dev);
    } else {
        SR_CHECK(v->dim() == 2 && v->size(0) >= 1, "crossnet: v must be [r, N], got {}", v->str());
        d.r = v->size(0);
        check_f32(*v, "v", {d.r, d.N}, dev);
        check_f32(w, "w", {d.N, d.r}, dev);
    }
    return d;
}

}  // namespace

void crossnet_forward(const Tensor& x0,
                      const Tensor& xl,
                      const Tensor& w,
                      const Tensor* v,
                      const Tensor& bias,
                      Tensor& out,
                      Tensor& u,
                      Tensor* vx,
                      Stream& stream) {
    const CrossDims d = check_layer(x0, xl, w, v);
    const Device dev = x0.device();
    check_f32(bias, "bias", {d.N}, dev);
    check_f32(out, "out", {d.B, d.N}, dev);
    check_f32(u, "u", {d.B, d.N}, dev);
    SR_CHECK((vx != nullptr) == (v != nullptr), "crossnet_forward: vx is required exactly with v");
    if (vx != nullptr) {
        check_f32(*vx, "vx", {d.B, d.r}, dev);
    }
    SR_CHECK(out.data_ptr() != x0.data_ptr() && out.data_ptr() != xl.data_ptr(),
             "crossnet_forward: out must not alias x0 or xl");
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::crossnet_forward(x0, xl, w, v, bias, out, u, vx);
        case DeviceType::kCuda:
            return cuda::crossnet_forward(x0, xl, w, v, bias, out, u, vx, stream);
    }
}

void crossnet_backward(const Tensor& x0,
                       const Tensor& xl,
                       const Tensor& w,
                       const Tensor* v,
                       const Tensor& u,
                       const Tensor* vx,
                       const Tensor& grad_out,
                       Tensor& grad_x0,
                       Tensor& grad_xl,
                       Tensor& grad_w,
                       Tensor* grad_v,
                       Tensor& grad_b,
                       Stream& stream) {
    const CrossDims d = check_layer(x0, xl, w, v);
    const Device dev = x0.device();
    check_f32(u, "u", {d.B, d.N}, dev);
    SR_CHECK((vx != nullptr) == (v != nullptr) && (grad_v != nullptr) == (v != nullptr),
             "crossnet_backward: vx and grad_v are required exactly with v");
    if (vx != nullptr) {
        check_f32(*vx, "vx", {d.B, d.r}, dev);
    }
    check_f32(grad_out, "grad_out", {d.B, d.N}, dev);
    check_f32(grad_x0, "grad_x0", {d.B, d.N}, dev);
    check_f32(grad_xl, "grad_xl", {d.B, d.N}, dev);
    check_f32(grad_w, "grad_w", w.shape(), dev);
    if (grad_v != nullptr) {
        check_f32(*grad_v, "grad_v", {d.r, d.N}, dev);
    }
    check_f32(grad_b, "grad_b", {d.N}, dev);
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::crossnet_backward(x0, xl, w, v, u, vx, grad_out, grad_x0, grad_xl, grad_w,
                                          grad_v, grad_b);
        case DeviceType::kCuda:
            return cuda::crossnet_backward(x0, xl, w, v, u, vx, grad_out, grad_x0, grad_xl, grad_w,
                                           grad_v, grad_b, stream);
    }
}

}  // namespace shardrec::kernels
