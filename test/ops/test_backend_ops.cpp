// Runs every OpCase on every backend against the float64 reference, and fails for any op without
// a case (coverage gate). A backend that is absent is reported as not run, never as passed.
#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <vector>

#include "kernels/linear.h"
#include "test/ops/check_case.h"

using namespace shardrec;
using namespace shardrec::test;

TEST_CASE("backend ops: every case matches the float64 reference on the CPU", "[ops][cpu]") {
    for (auto& c : all_op_cases()) {
        if (c->bench_only())
            continue;
        DYNAMIC_SECTION(kernels::op_name(c->kind()) << "(" << c->vars() << ") on cpu") {
            check_case(*c, Device::cpu());
        }
    }
}

TEST_CASE("backend ops: every case is deterministic on the CPU", "[ops][cpu]") {
    for (auto& c : all_op_cases()) {
        if (c->bench_only())
            continue;
        DYNAMIC_SECTION(kernels::op_name(c->kind()) << "(" << c->vars() << ") twice") {
            check_case_deterministic(*c, Device::cpu());
        }
    }
}

TEST_CASE("backend ops: every op has at least one case that checks it", "[ops][coverage]") {
    std::set<kernels::OpKind> covered;  // by a case that checks correctness, not a bench-only one
    for (auto& c : all_op_cases()) {
        if (!c->bench_only())
            covered.insert(c->kind());
    }
    for (size_t i = 0; i < kernels::kNumOps; ++i) {
        const auto op = static_cast<kernels::OpKind>(i);
        INFO("op without a case: " << kernels::op_name(op));
        CHECK(covered.count(op) == 1);
    }
}

TEST_CASE("backend ops: the GEMM cases within the rounding of bf16 math on the CPU", "[ops][cpu]") {
    // oneDNN's bf16 matmul on operands rounded to bf16 (unit 2^-8), f32 accumulation: the bound
    // of the CUDA bf16 cases (test_backend_ops_cuda.cpp), eight units of each output's magnitude.
    struct Restore {
        ~Restore() { kernels::set_gemm_math(kernels::GemmMath::kF32); }
    } restore;

    for (auto& c : all_op_cases()) {
        if (c->bench_only() || c->gemms().empty())
            continue;
        DYNAMIC_SECTION(kernels::op_name(c->kind()) << "(" << c->vars() << ") in bf16 on cpu") {
            kernels::set_gemm_math(kernels::GemmMath::kBf16);
            check_case(*c, Device::cpu(), 8 * 0x1p-8);
            check_case_deterministic(*c, Device::cpu());
        }
    }
}

TEST_CASE("linear in bf16 math on the CPU rounds each operand to bf16 and accumulates in f32",
          "[ops][cpu]") {
    struct Restore {
        ~Restore() { kernels::set_gemm_math(kernels::GemmMath::kF32); }
    } restore;

    // x = 1 + 2^-10 rounds to 1 in bf16 (7 mantissa bits); w = 3 is exact. Over I = 300 inputs
    // the f32 sum 900 + 300 * 3 * 2^-10 needs f32 accumulation to hold the 2^-8 steps of 300.
    const int64_t I = 300;
    const Tensor x = Tensor::from_vector(std::vector<float>(I, 1.0f + 0x1p-10f), {1, I});
    const Tensor w = Tensor::from_vector(std::vector<float>(I, 3.0f), {1, I});
    Tensor y = Tensor::empty({1, 1}, DType::kF32);
    Stream& stream = Stream::cpu();
    kernels::linear_forward(x, w, nullptr, kernels::Activation::kIdentity, y, stream);
    CHECK(y.data<float>()[0] == 900.0f + 300.0f * 3.0f * 0x1p-10f);
    kernels::set_gemm_math(kernels::GemmMath::kBf16);
    kernels::linear_forward(x, w, nullptr, kernels::Activation::kIdentity, y, stream);
    CHECK(y.data<float>()[0] == 900.0f);
    // 1 + 2^-7 is a bf16 value: kept, and the 300 products sum exactly in f32.
    const Tensor x2 = Tensor::from_vector(std::vector<float>(I, 1.0f + 0x1p-7f), {1, I});
    kernels::linear_forward(x2, w, nullptr, kernels::Activation::kIdentity, y, stream);
    CHECK(y.data<float>()[0] == 900.0f + 900.0f * 0x1p-7f);
}
