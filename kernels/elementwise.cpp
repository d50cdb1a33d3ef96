// Element-wise ops: argument checks (all of them, once) and the device switch.
#include "kernels/elementwise.h"

namespace shardrec::kernels {

void add_(Tensor& a, const Tensor& b, Stream& stream) {
    SR_CHECK(a.defined() && b.defined(), "add_: undefined tensor");
    SR_CHECK(a.dtype() == DType::kF32 && b.dtype() == DType::kF32, "add_: {} += {} must be f32",
             a.str(), b.str());
    SR_CHECK(a.numel() == b.numel(), "add_: {} += {} differ in size", a.str(), b.str());
    SR_CHECK(a.device() == b.device(), "add_: {} += {} are on different devices", a.str(), b.str());
    SR_CHECK(a.data_ptr() != b.data_ptr() || a.numel() == 0, "add_: b aliases a");
    switch (a.device().type) {
        case DeviceType::kCpu:
            return cpu::add_(a, b);
        case DeviceType::kCuda:
            return cuda::add_(a, b, stream);
    }
}

}  // namespace shardrec::kernels
