// Dot interaction forward/backward: argument checks (all of them, once) and the device switch.
#include "kernels/dot_interaction.h"

#include <array>

namespace shardrec::kernels {
namespace {

void check_f32(const Tensor& t, const char* name, const Shape& want, Device device) {
    SR_CHECK(t.defined(), "{} is undefined", name);
    SR_CHECK(t.dtype() == DType::kF32, "{} must be f32, got {}", name, t.str());
    SR_CHECK(t.shape() == want, "{} must be {}, got {}", name, shape_str(want), t.str());
    SR_CHECK(t.device() == device, "{} is on {}, expected {}", name, t.device().str(),
             device.str());
}

// Returns {B, D, F} after checking dense [B, D] and sparse [B, F * D].
std::array<int64_t, 3> check_inputs(const Tensor& dense, const Tensor& sparse) {
    SR_CHECK(dense.dim() == 2 && sparse.dim() == 2,
             "dot_interaction: dense {} and sparse {} "
             "must be 2-D",
             dense.str(), sparse.str());
    const int64_t B = dense.size(0), D = dense.size(1);
    SR_CHECK(B >= 1 && D >= 1, "dot_interaction: empty dense {}", dense.str());
    SR_CHECK(sparse.size(1) % D == 0,
             "dot_interaction: sparse width {} is not a multiple of "
             "D = {}",
             sparse.size(1), D);
    const int64_t F = sparse.size(1) / D;
    check_f32(dense, "dense", {B, D}, dense.device());
    check_f32(sparse, "sparse", {B, F * D}, dense.device());
    return {B, D, F};
}

}  // namespace

void dot_interaction_forward(const Tensor& dense,
                             const Tensor& sparse,
                             Tensor& out,
                             Stream& stream) {
    const auto [B, D, F] = check_inputs(dense, sparse);
    check_f32(out, "out", {B, D + (F + 1) * F / 2}, dense.device());
    switch (dense.device().type) {
        case DeviceType::kCpu:
            return cpu::dot_interaction_forward(dense, sparse, out);
        case DeviceType::kCuda:
            return cuda::dot_interaction_forward(dense, sparse, out, stream);
    }
}

void dot_interaction_backward(const Tensor& dense,
                              const Tensor& sparse,
                              const Tensor& grad_out,
                              Tensor& grad_dense,
                              Tensor& grad_sparse,
                              Stream& stream) {
    const auto [B, D, F] = check_inputs(dense, sparse);
    check_f32(grad_out, "grad_out", {B, D + (F + 1) * F / 2}, dense.device());
    check_f32(grad_dense, "grad_dense", {B, D}, dense.device());
    check_f32(grad_sparse, "grad_sparse", {B, F * D}, dense.device());
    switch (dense.device().type) {
        case DeviceType::kCpu:
            return cpu::dot_interaction_backward(dense, sparse, grad_out, grad_dense, grad_sparse);
        case DeviceType::kCuda:
            return cuda::dot_interaction_backward(dense, sparse, grad_out, grad_dense, grad_sparse,
                                                  stream);
    }
}

}  // namespace shardrec::kernels
