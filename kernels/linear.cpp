// Linear forward/backward: argument checks (all of them, once) and the device switch.
#include "kernels/linear.h"

#include <cblas.h>

#include <atomic>

namespace shardrec::kernels {
namespace {

void check_f32(const Tensor& t, const char* name, const Shape& want, Device device) {
    SR_CHECK(t.defined(), "{} is undefined", name);
    SR_CHECK(t.dtype() == DType::kF32, "{} must be f32, got {}", name, t.str());
    SR_CHECK(t.shape() == want, "{} must be {}, got {}", name, shape_str(want), t.str());
    SR_CHECK(t.device() == device, "{} is on {}, expected {}", name, t.device().str(),
             device.str());
}

struct LinearDims {
    int64_t B, I, O;
};

LinearDims check_linear_inputs(const Tensor& x, const Tensor& w) {
    SR_CHECK(x.dim() == 2 && w.dim() == 2, "linear: x {} and w {} must be 2-D", x.str(), w.str());
    const LinearDims d{x.size(0), x.size(1), w.size(0)};
    SR_CHECK(d.B >= 1 && d.I >= 1 && d.O >= 1, "linear: empty shape x {} w {}", x.str(), w.str());
    check_f32(x, "x", {d.B, d.I}, x.device());
    check_f32(w, "w", {d.O, d.I}, x.device());
    return d;
}

}  // namespace

const char* activation_name(Activation act) {
    switch (act) {
        case Activation::kIdentity:
            return "identity";
        case Activation::kRelu:
            return "relu";
        case Activation::kSigmoid:
            return "sigmoid";
    }
    return "?";
}

Activation activation_from_name(const std::string& name) {
    for (Activation a : {Activation::kIdentity, Activation::kRelu, Activation::kSigmoid}) {
        if (name == activation_name(a)) {
            return a;
        }
    }
    SR_CHECK(false, "unknown activation '{}' (identity, relu or sigmoid)", name);
    return Activation::kIdentity;
}

void linear_forward(const Tensor& x,
                    const Tensor& w,
                    const Tensor* bias,
                    Activation act,
                    Tensor& y,
                    Stream& stream) {
    const LinearDims d = check_linear_inputs(x, w);
    if (bias != nullptr) {
        check_f32(*bias, "bias", {d.O}, x.device());
    }
    check_f32(y, "y", {d.B, d.O}, x.device());
    SR_CHECK(y.data_ptr() != x.data_ptr() && y.data_ptr() != w.data_ptr(),
             "linear_forward: y must not alias x or w");
    switch (x.device().type) {
        case DeviceType::kCpu:
            return cpu::linear_forward(x, w, bias, act, y);
        case DeviceType::kCuda:
            return cuda::linear_forward(x, w, bias, act, y, stream);
    }
}

void linear_backward(const Tensor& x,
                     const Tensor& w,
                     const Tensor& y,
                     const Tensor& grad_y,
                     Activation act,
                     Tensor* grad_x,
                     Tensor& grad_w,
                     Tensor* grad_b,
                     Stream& stream) {
    const LinearDims d = check_linear_inputs(x, w);
    check_f32(y, "y", {d.B, d.O}, x.device());
    check_f32(grad_y, "grad_y", {d.B, d.O}, x.device());
    if (grad_x != nullptr) {
        check_f32(*grad_x, "grad_x", {d.B, d.I}, x.device());
    }
    check_f32(grad_w, "grad_w", {d.O, d.I}, x.device());
    if (grad_b != nullptr) {
        check_f32(*grad_b, "grad_b", {d.O}, x.device());
    }
    switch (x.device().type) {
        case DeviceType::kCpu:
            return cpu::linear_backward(x, w, y, grad_y, act, grad_x, grad_w, grad_b);
        case DeviceType::kCuda:
            return cuda::linear_backward(x, w, y, grad_y, act, grad_x, grad_w, grad_b, stream);
    }
}

namespace {
std::atomic<GemmMath> g_gemm_math{GemmMath::kF32};
}  // namespace

const char* gemm_math_name(GemmMath math) {
    switch (math) {
        case GemmMath::kF32:
            return "f32";
        case GemmMath::kTf32:
            return "tf32";
        case GemmMath::kBf16:
            return "bf16";
    }
    return "?";
}

GemmMath gemm_math_from_name(const std::string& name) {
    for (GemmMath m : {GemmMath::kF32, GemmMath::kTf32, GemmMath::kBf16}) {
        if (name == gemm_math_name(m)) {
            return m;
        }
    }
    SR_CHECK(false, "unknown GEMM math '{}' (f32, tf32 or bf16)", name);
    return GemmMath::kF32;
}

void set_gemm_math(GemmMath math) {
    // A copy made in another math could be stale by the time this math is back.
    drop_gemm_weight_copies();
    g_gemm_math.store(math);
}

GemmMath gemm_math() {
    return g_gemm_math.load();
}

namespace {
std::atomic<bool> g_row_invariant{false};
}  // namespace

void set_row_invariant_gemms(bool on) {
    g_row_invariant.store(on);
}

bool row_invariant_gemms() {
    return g_row_invariant.load();
}

void set_blas_num_threads(int num_threads) {
    SR_CHECK(num_threads >= 1, "BLAS thread count must be >= 1, got {}", num_threads);
    openblas_set_num_threads(num_threads);
}

int blas_num_threads() {
    return openblas_get_num_threads();
}

const char* blas_threading() {
    switch (openblas_get_parallel()) {
        case 0:
            return "sequential";
        case 1:
            return "pthreads";
        case 2:
            return "OpenMP";
        default:
            return "unknown";
    }
}

}  // namespace shardrec::kernels
