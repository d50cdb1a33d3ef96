// The two checks every backend runs over every case (test_backend_ops for the CPU,
// test_backend_ops_cuda for CUDA): against the float64 reference with guards intact, and
// bitwise-identical outputs on a repeated run.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>

#include "kernels/linear.h"
#include "test/ops/op_case.h"

namespace shardrec::test {

// extra_rel widens every output's bound by that much of its magnitude (reduced-precision math).
inline void check_case(OpCase& c, Device device, double extra_rel = 0) {
    c.make_inputs(test_seed());
    const std::vector<RefOutput> ref = c.reference();
    const CaseRun got = run_case(c, device, test_seed());
    REQUIRE(got.outputs.size() == ref.size());
    INFO("guards: " << got.guards);
    CHECK(got.guards.empty());
    for (size_t i = 0; i < ref.size(); ++i) {
        Tolerance tol = c.tolerance(i);
        tol.extra_rel += extra_rel;
        const CompareResult r =
            compare(checked_values(got.outputs[i], ref[i]), ref[i].value, ref[i].mag, tol);
        INFO("output " << ref[i].name << ": " << r.report);
        CHECK(r.ok);
    }
}

inline void check_case_deterministic(OpCase& c, Device device) {
    const CaseRun first = run_case(c, device, test_seed());
    const CaseRun second = run_case(c, device, test_seed());
    REQUIRE(first.outputs.size() == second.outputs.size());
    for (size_t i = 0; i < first.outputs.size(); ++i) {
        const std::vector<double>& a = first.outputs[i];
        const std::vector<double>& b = second.outputs[i];
        REQUIRE(a.size() == b.size());
        INFO("output " << i << " differs between two runs of the same inputs");
        CHECK((b.empty() || std::memcmp(a.data(), b.data(), b.size() * sizeof(double)) == 0));
    }
}

// bf16 math rounds every GEMM operand to bf16 and accumulates in f32, forward (linear) and
// backward (grad_w, grad_x): x = 1 + 2^-10 rounds to 1 (7 mantissa bits; TF32's 10 would keep
// it), w = 3 and the gradient 1 are exact, and over I >= 300 inputs the sum 3 I + 3 I 2^-10 needs
// f32 accumulation to hold the 2^-8 steps of I. I = 300 and 304: rows of 8 floats and not (the
// CUDA rounding pass has a vector path for the one).
inline void check_bf16_operand_rounding(Device device) {
    struct Restore {
        ~Restore() { kernels::set_gemm_math(kernels::GemmMath::kF32); }
    } restore;

    for (const int64_t I : {int64_t{300}, int64_t{304}}) {
        INFO("I = " << I);
        kernels::set_gemm_math(kernels::GemmMath::kF32);
        const float fi = static_cast<float>(I);
        auto on = [&](std::vector<float> v) {
            const auto n = static_cast<int64_t>(v.size());
            return Tensor::from_vector(std::move(v), {n / I, I}).to(device);
        };
        Stream stream(device);
        auto value = [&](const Tensor& t, int64_t i) {
            stream.synchronize();
            return t.to(Device::cpu()).data<float>()[i];
        };
        const Tensor x = on(std::vector<float>(static_cast<size_t>(I), 1.0f + 0x1p-10f));
        const Tensor w = on(std::vector<float>(static_cast<size_t>(I), 3.0f));
        Tensor y = Tensor::empty({1, 1}, DType::kF32, device);
        kernels::linear_forward(x, w, nullptr, kernels::Activation::kIdentity, y, stream);
        CHECK(value(y, 0) == 3.0f * fi + fi * 3.0f * 0x1p-10f);
        kernels::set_gemm_math(kernels::GemmMath::kBf16);
        kernels::linear_forward(x, w, nullptr, kernels::Activation::kIdentity, y, stream);
        CHECK(value(y, 0) == 3.0f * fi);
        // 1 + 2^-7 is a bf16 value: kept, and the I products sum exactly in f32.
        const Tensor x2 = on(std::vector<float>(static_cast<size_t>(I), 1.0f + 0x1p-7f));
        kernels::linear_forward(x2, w, nullptr, kernels::Activation::kIdentity, y, stream);
        CHECK(value(y, 0) == 3.0f * fi + 3.0f * fi * 0x1p-7f);
        // Backward with grad_y = 1: grad_w = x rounded, grad_x = w.
        const Tensor grad_y = Tensor::from_vector(std::vector<float>{1.0f}, {1, 1}).to(device);
        Tensor grad_w = Tensor::empty({1, I}, DType::kF32, device);
        Tensor grad_x = Tensor::empty({1, I}, DType::kF32, device);
        kernels::linear_backward(x, w, y, grad_y, kernels::Activation::kIdentity, &grad_x, grad_w,
                                 nullptr, stream);
        CHECK(value(grad_w, I - 1) == 1.0f);
        CHECK(value(grad_x, I - 1) == 3.0f);
    }
}

}  // namespace shardrec::test
