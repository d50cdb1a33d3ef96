// FactorizationMachine forward/backward: argument checks (all of them, once) and the device
// switch.
#include "kernels/factorization_machine.h"

namespace shardrec::kernels {
namespace {

void check_f32(const Tensor& t, const char* name, const Shape& want, Device device) {
    SR_CHECK(t.defined(), "{} is undefined", name);
    SR_CHECK(t.dtype() == DType::kF32, "{} must be f32, got {}", name, t.str());
    SR_CHECK(t.shape() == want, "{} must be {}, got {}", name, shape_str(want), t.str());
    SR_CHECK(t.device() == device, "{} is on {}, expected {}", name, t.device().str(),
             device.str());
}

void check_x(const Tensor& x) {
    SR_CHECK(x.dim() == 2 && x.size(0) >= 1 && x.size(1) >= 1,
             "factorization_machine: x must be [B, N] with B, N >= 1, got {}", x.str());
    check_f32(x, "x", x.shape(), x.device());
}

}  // namespace

void factorization_machine_forward(const Tensor& x, Tensor& out, Stream& stream) {
    check_x(x);
    check_f32(out, "out", {x.size(0), 1}, x.device());
    switch (x.device().type) {
        case DeviceType::kCpu:
            return cpu::factorization_machine_forward(x, out);
        case DeviceType::kCuda:
            return cuda::factorization_machine_forward(x, out, stream);
    }
}

void factorization_machine_backward(const Tensor& x,
                                    const Tensor& grad_out,
                                    Tensor& grad_x,
                                    Stream& stream) {
    check_x(x);
    check_f32(grad_out, "grad_out", {x.size(0), 1}, x.device());
    check_f32(grad_x, "grad_x", x.shape(), x.device());
    switch (x.device().type) {
        case DeviceType::kCpu:
            return cpu::factorization_machine_backward(x, grad_out, grad_x);
        case DeviceType::kCuda:
            return cuda::factorization_machine_backward(x, grad_out, grad_x, stream);
    }
}

}  // namespace shardrec::kernels
