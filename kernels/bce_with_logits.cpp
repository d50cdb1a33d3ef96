// BCE-with-logits: argument checks (all of them, once) and the device switch.
#include "kernels/bce_with_logits.h"

namespace shardrec::kernels {

void bce_with_logits(
    const Tensor& logits, const Tensor& labels, Tensor& loss, Tensor& grad_logits, Stream& stream) {
    SR_CHECK(logits.defined() && labels.defined() && loss.defined() && grad_logits.defined(),
             "bce_with_logits: undefined tensor");
    SR_CHECK(logits.dim() == 1 || (logits.dim() == 2 && logits.size(1) == 1),
             "bce_with_logits: logits must be [B] or [B, 1], got {}", logits.str());
    SR_CHECK(logits.numel() >= 1, "bce_with_logits: empty batch");
    const Device dev = logits.device();
    for (const Tensor* t : {&logits, &labels, static_cast<const Tensor*>(&loss),
                            static_cast<const Tensor*>(&grad_logits)}) {
        SR_CHECK(t->dtype() == DType::kF32, "bce_with_logits: {} must be f32", t->str());
        SR_CHECK(t->device() == dev, "bce_with_logits: {} is not on {}", t->str(), dev.str());
    }
    SR_CHECK(labels.numel() == logits.numel(), "bce_with_logits: labels {} vs logits {}",
             labels.str(), logits.str());
    SR_CHECK(grad_logits.shape() == logits.shape(),
             "bce_with_logits: grad_logits {} must match "
             "logits {}",
             grad_logits.str(), logits.str());
    SR_CHECK(loss.shape() == Shape{1}, "bce_with_logits: loss must be [1], got {}", loss.str());
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::bce_with_logits(logits, labels, loss, grad_logits);
        case DeviceType::kCuda:
            return cuda::bce_with_logits(logits, labels, loss, grad_logits, stream);
    }
}

}  // namespace shardrec::kernels
