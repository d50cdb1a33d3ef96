// Mixture cross layer forward/backward: argument checks (all of them, once) and the device
// switch.
#include "kernels/mixture_crossnet.h"

namespace shardrec::kernels {
namespace {

void check_f32(const Tensor* t, const char* name, const Shape& want, Device device) {
    SR_CHECK(t != nullptr && t->defined(), "{} is missing", name);
    SR_CHECK(t->dtype() == DType::kF32, "{} must be f32, got {}", name, t->str());
    SR_CHECK(t->shape() == want, "{} must be {}, got {}", name, shape_str(want), t->str());
    SR_CHECK(t->device() == device, "{} is on {}, expected {}", name, t->device().str(),
             device.str());
}

struct MixtureDims {
    int64_t B, N, K, r;
};

MixtureDims check_layer(const Tensor& x0, const Tensor& xl, const MixtureCrossNetWeights& wt) {
    SR_CHECK(x0.dim() == 2 && x0.size(0) >= 1 && x0.size(1) >= 1,
             "mixture_crossnet: x0 must be [B, N] with B, N >= 1, got {}", x0.str());
    SR_CHECK(wt.v != nullptr && wt.v->dim() == 3, "mixture_crossnet: v must be [K, r, N]");
    const MixtureDims d{x0.size(0), x0.size(1), wt.v->size(0), wt.v->size(1)};
    SR_CHECK(d.K >= 1 && d.r >= 1, "mixture_crossnet: need K >= 1 and r >= 1, v is {}",
             wt.v->str());
    const Device dev = x0.device();
    check_f32(&x0, "x0", {d.B, d.N}, dev);
    check_f32(&xl, "xl", {d.B, d.N}, dev);
    check_f32(wt.u, "u", {d.K, d.N, d.r}, dev);
    check_f32(wt.c, "c", {d.K, d.r, d.r}, dev);
    check_f32(wt.v, "v", {d.K, d.r, d.N}, dev);
    check_f32(wt.bias, "bias", {d.N}, dev);
    SR_CHECK((wt.gates != nullptr) == (d.K > 1),
             "mixture_crossnet: gates are required exactly "
             "when K > 1 (K = {})",
             d.K);
    if (wt.gates != nullptr) {
        check_f32(wt.gates, "gates", {d.K, d.N}, dev);
    }
    return d;
}

void check_saved(const MixtureDims& d, const MixtureCrossNetSaved& s, Device dev) {
    check_f32(s.a1, "saved.a1", {d.B, d.K, d.r}, dev);
    check_f32(s.a2, "saved.a2", {d.B, d.K, d.r}, dev);
    check_f32(s.e, "saved.e", {d.B, d.K, d.N}, dev);
    SR_CHECK((s.probs != nullptr) == (d.K > 1),
             "mixture_crossnet: saved.probs is required "
             "exactly when K > 1");
    if (s.probs != nullptr) {
        check_f32(s.probs, "saved.probs", {d.B, d.K}, dev);
    }
}

}  // namespace

void mixture_crossnet_forward(const Tensor& x0,
                              const Tensor& xl,
                              const MixtureCrossNetWeights& weights,
                              Activation act,
                              Tensor& out,
                              const MixtureCrossNetSaved& saved,
                              Stream& stream) {
    const MixtureDims d = check_layer(x0, xl, weights);
    const Device dev = x0.device();
    check_f32(&out, "out", {d.B, d.N}, dev);
    check_saved(d, saved, dev);
    SR_CHECK(out.data_ptr() != x0.data_ptr() && out.data_ptr() != xl.data_ptr(),
             "mixture_crossnet_forward: out must not alias x0 or xl");
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::mixture_crossnet_forward(x0, xl, weights, act, out, saved);
        case DeviceType::kCuda:
            return cuda::mixture_crossnet_forward(x0, xl, weights, act, out, saved, stream);
    }
}

void mixture_crossnet_backward(const Tensor& x0,
                               const Tensor& xl,
                               const MixtureCrossNetWeights& weights,
                               Activation act,
                               const MixtureCrossNetSaved& saved,
                               const Tensor& grad_out,
                               const MixtureCrossNetGrads& grads,
                               Stream& stream) {
    const MixtureDims d = check_layer(x0, xl, weights);
    const Device dev = x0.device();
    check_saved(d, saved, dev);
    check_f32(&grad_out, "grad_out", {d.B, d.N}, dev);
    check_f32(grads.x0, "grads.x0", {d.B, d.N}, dev);
    check_f32(grads.xl, "grads.xl", {d.B, d.N}, dev);
    check_f32(grads.u, "grads.u", {d.K, d.N, d.r}, dev);
    check_f32(grads.c, "grads.c", {d.K, d.r, d.r}, dev);
    check_f32(grads.v, "grads.v", {d.K, d.r, d.N}, dev);
    check_f32(grads.bias, "grads.bias", {d.N}, dev);
    SR_CHECK((grads.gates != nullptr) == (d.K > 1),
             "mixture_crossnet: grads.gates is required "
             "exactly when K > 1");
    if (grads.gates != nullptr) {
        check_f32(grads.gates, "grads.gates", {d.K, d.N}, dev);
    }
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::mixture_crossnet_backward(x0, xl, weights, act, saved, grad_out, grads);
        case DeviceType::kCuda:
            return cuda::mixture_crossnet_backward(x0, xl, weights, act, saved, grad_out, grads,
                                                   stream);
    }
}

}  // namespace shardrec::kernels
