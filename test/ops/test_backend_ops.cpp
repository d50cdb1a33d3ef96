// Runs every OpCase on every backend against the float64 reference, and fails for any op without
// a case (coverage gate). A backend that is absent is reported as not run, never as passed.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "kernels/dense_optimizer.h"
#include "kernels/device_ceilings.h"
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
    check_bf16_operand_rounding(Device::cpu());
}

TEST_CASE("bf16 math on the CPU: a weight's refreshed copy gives the bits of rounding per GEMM",
          "[ops][cpu]") {
    struct Restore {
        ~Restore() { kernels::set_gemm_math(kernels::GemmMath::kF32); }
    } restore;

    kernels::set_gemm_math(kernels::GemmMath::kBf16);
    Stream& stream = Stream::cpu();
    const int64_t B = 37, I = 70, O = 45;
    std::vector<float> xv(B * I), wv(O * I);
    for (size_t i = 0; i < xv.size(); ++i)
        xv[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < wv.size(); ++i)
        wv[i] = std::cos(0.11f * static_cast<float>(i));
    const Tensor x = Tensor::from_vector(xv, {B, I});
    Tensor w = Tensor::from_vector(wv, {O, I});
    Tensor per_call = Tensor::empty({B, O}, DType::kF32), copied = per_call.clone();
    kernels::linear_forward(x, w, nullptr, kernels::Activation::kRelu, per_call, stream);
    kernels::refresh_gemm_weight(w);
    kernels::linear_forward(x, w, nullptr, kernels::Activation::kRelu, copied, stream);
    CHECK(std::memcmp(per_call.data<float>(), copied.data<float>(), sizeof(float) * B * O) == 0);
    // The GEMMs read the copy until the next refresh: a weight changed in between (which a module
    // never does between its forward and backward) still computes with the refreshed values.
    w.data<float>()[0] += 1.0f;
    Tensor stale = per_call.clone();
    kernels::linear_forward(x, w, nullptr, kernels::Activation::kRelu, stale, stream);
    CHECK(std::memcmp(per_call.data<float>(), stale.data<float>(), sizeof(float) * B * O) == 0);
    kernels::refresh_gemm_weight(w);
    kernels::linear_forward(x, w, nullptr, kernels::Activation::kRelu, stale, stream);
    CHECK(std::memcmp(per_call.data<float>(), stale.data<float>(), sizeof(float) * B * O) != 0);
    // Switching the math drops every copy: back in bf16 the changed weight is rounded afresh.
    w.data<float>()[1] += 1.0f;
    Tensor fresh = per_call.clone(), again = per_call.clone();
    kernels::set_gemm_math(kernels::GemmMath::kBf16);
    kernels::linear_forward(x, w, nullptr, kernels::Activation::kRelu, fresh, stream);
    kernels::refresh_gemm_weight(w);
    kernels::linear_forward(x, w, nullptr, kernels::Activation::kRelu, again, stream);
    CHECK(std::memcmp(fresh.data<float>(), again.data<float>(), sizeof(float) * B * O) == 0);
    CHECK(std::memcmp(fresh.data<float>(), stale.data<float>(), sizeof(float) * B * O) != 0);
}

TEST_CASE(
    "bf16 math on the CPU: an activation's kept copy gives the bits of rounding per GEMM, "
    "and dies with its storage",
    "[ops][cpu]") {
    struct Restore {
        ~Restore() { kernels::set_gemm_math(kernels::GemmMath::kF32); }
    } restore;

    kernels::set_gemm_math(kernels::GemmMath::kBf16);
    Stream& stream = Stream::cpu();
    const int64_t B = 37, I = 70, O = 45;
    std::vector<float> xv(B * I), wv(O * I), gv(B * O);
    for (size_t i = 0; i < xv.size(); ++i)
        xv[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < wv.size(); ++i)
        wv[i] = std::cos(0.11f * static_cast<float>(i));
    for (size_t i = 0; i < gv.size(); ++i)
        gv[i] = std::sin(0.23f * static_cast<float>(i) + 1.0f);
    Tensor x = Tensor::from_vector(xv, {B, I});
    const Tensor w = Tensor::from_vector(wv, {O, I});
    const Tensor grad_y = Tensor::from_vector(gv, {B, O});

    struct Step {
        Tensor y, grad_x, grad_w;
    };

    const auto step = [&](const Tensor& in) {
        Step s{Tensor::empty({B, O}, DType::kF32), Tensor::empty({B, I}, DType::kF32),
               Tensor::empty({O, I}, DType::kF32)};
        kernels::linear_forward(in, w, nullptr, kernels::Activation::kRelu, s.y, stream);
        kernels::linear_backward(in, w, s.y, grad_y, kernels::Activation::kRelu, &s.grad_x,
                                 s.grad_w, nullptr, stream);
        return s;
    };
    const auto same = [](const Tensor& a, const Tensor& b) {
        return std::memcmp(a.data<float>(), b.data<float>(), sizeof(float) * a.numel()) == 0;
    };
    const Step per_call = step(x);
    {
        const kernels::Bf16ActivationCopy kept(x);  // a module's forward to its backward
        const Step copied = step(x);
        CHECK(same(per_call.y, copied.y));
        CHECK(same(per_call.grad_w, copied.grad_w));
        CHECK(same(per_call.grad_x, copied.grad_x));
        // The GEMMs read the copy while the handle lives (x must not change meanwhile).
        x.data<float>()[0] += 1.0f;
        CHECK(same(per_call.y, step(x).y));
    }
    // Dropped: x is rounded per call again.
    CHECK(!same(per_call.y, step(x).y));
    // A copy dies with its tensor's storage: another tensor at the same address afterwards (a
    // freed buffer reused) is rounded afresh though the handle still lives.
    std::vector<float> memory(xv);
    kernels::Bf16ActivationCopy kept;
    {
        const Tensor t = Tensor::from_blob(memory.data(), {B, I}, DType::kF32);
        kept = kernels::Bf16ActivationCopy(t);
    }
    for (float& v : memory)
        v = 0.5f - v;
    const Tensor u = Tensor::from_blob(memory.data(), {B, I}, DType::kF32);
    const Step fresh = step(u);
    kept = {};
    const Step expect = step(u);
    CHECK(same(fresh.y, expect.y));
    CHECK(same(fresh.grad_w, expect.grad_w));
}

TEST_CASE("host ceilings: random-row reads are measured, and odd rows are refused", "[ops][cpu]") {
    // 256-byte rows of a 4 MiB table: small enough for a test, the path of bench_ops's %rr.
    const double gbps = kernels::host_random_row_gbps(256, size_t{4} << 20, 1 << 14, 1);
    CHECK(gbps > 0.01);
    CHECK(gbps < 1e5);
    CHECK_THROWS_WITH(kernels::host_random_row_gbps(6, size_t{4} << 20),
                      Catch::Matchers::Contains("rows of 6 bytes"));
}

// The CPU loops built for AVX-512 as well (kernels/cpu/avx512_clones.h) may use FMA instructions
// there; the kernels are compiled without contraction, so either build rounds each product and
// each sum on its own, as the scalar rule does (the volatile temporaries force that here), and
// results do not depend on the CPU.
TEST_CASE("CPU kernels round alike on every CPU: the dense Adagrad update is its rule, bit for bit",
          "[ops][cpu]") {
    const int64_t n = 4099;
    std::vector<float> w(n), g(n), s(n);
    for (int64_t i = 0; i < n; ++i) {
        const auto x = static_cast<float>(i);
        w[static_cast<size_t>(i)] = std::sin(0.7f * x);
        g[static_cast<size_t>(i)] = 0.37f * std::cos(1.3f * x);
        s[static_cast<size_t>(i)] = 0.1f + std::fabs(std::sin(0.29f * x));
    }
    Tensor wt = Tensor::from_vector(w, {n}), st = Tensor::from_vector(s, {n});
    const Tensor gt = Tensor::from_vector(g, {n});
    const float lr = 0.05f, eps = 1e-8f, wd = 0.013f;
    kernels::adagrad_update(wt, gt, st, lr, eps, wd, Stream::cpu());
    int64_t differ = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        volatile float decay = wd * w[i];
        volatile float gi = g[i] + decay;
        volatile float square = gi * gi;
        volatile float sum = s[i] + square;
        volatile float step = lr * gi;
        volatile float den = std::sqrt(sum) + eps;
        volatile float q = step / den;
        const float expect_w = w[i] - q, expect_s = sum;
        differ += std::memcmp(&expect_w, wt.data<float>() + i, 4) != 0 ||
                  std::memcmp(&expect_s, st.data<float>() + i, 4) != 0;
    }
    CHECK(differ == 0);
}
