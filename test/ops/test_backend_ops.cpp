// Runs every OpCase on every backend against the float64 reference, and fails for any op without
// a case (coverage gate). A backend that is absent is reported as not run, never as passed.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "kernels/cpu/linear.h"
#include "kernels/dense_optimizer.h"
#include "kernels/device_ceilings.h"
#include "kernels/linear.h"
#include "kernels/threads.h"
#include "test/ops/check_case.h"
#include "test/support/compare.h"

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

TEST_CASE("bf16 math on the CPU: oneDNN's matmul, or OpenBLAS sgemm on the rounded operands",
          "[ops][cpu]") {
    // Where oneDNN has no bf16 matmul (no AVX-512, or DNNL_MAX_CPU_ISA below it: ctest's
    // test_backend_ops_bf16_no_avx512), a bf16 GEMM is sgemm on the operands rounded to bf16,
    // bit for bit; with one, the same sums in oneDNN's order.
    struct Restore {
        ~Restore() { kernels::set_gemm_math(kernels::GemmMath::kF32); }
    } restore;

    using kernels::cpu::Trans;
    const int64_t m = 19, n = 23, k = 37;
    std::vector<float> a(m * k), b(k * n), a16(a.size()), b16(b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        a[i] = std::sin(0.37f * static_cast<float>(i));
        a16[i] = bf16_to_float(float_to_bf16(a[i]));
    }
    for (size_t i = 0; i < b.size(); ++i) {
        b[i] = std::cos(0.11f * static_cast<float>(i));
        b16[i] = bf16_to_float(float_to_bf16(b[i]));
    }
    std::vector<float> want(m * n), got(m * n, 1.0f);
    kernels::cpu::sgemm(Trans::kNo, Trans::kYes, m, n, k, a16.data(), k, b16.data(), k, 0.0f,
                        want.data(), n);
    kernels::set_gemm_math(kernels::GemmMath::kBf16);
    kernels::cpu::sgemm(Trans::kNo, Trans::kYes, m, n, k, a.data(), k, b.data(), k, 0.0f,
                        got.data(), n);
    const std::string backends = kernels::cpu_gemm_backends();
    INFO(backends);
    if (kernels::cpu::onednn_bf16_available()) {
        CHECK(backends.find("bf16: oneDNN") != std::string::npos);
        for (size_t i = 0; i < got.size(); ++i)
            REQUIRE(std::fabs(got[i] - want[i]) <= 1e-5f * (1.0f + std::fabs(want[i])));
    } else {
        CHECK(backends.find("bf16: OpenBLAS sgemm on bf16-rounded operands") != std::string::npos);
        CHECK(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()) == 0);
    }
}

TEST_CASE("row-invariant GEMMs: each element of C is one FMA chain over k, whatever M and threads",
          "[ops][cpu]") {
    // Scoring's mode (predict, serve, eval): C[i][j] = fma chain over p of A[i][p] op(B)[p][j]
    // from 0, plus beta C, bit for bit, for op(B) = B and B^T, beta 0, 1 (a bias written into C
    // first, as linear_forward does) and 0.3 (beta C rounds: a product, then the sum); all 203 rows
    // on one thread and two, and rows cut out of them (37 from 64, the last 11, one) give the same
    // bits. Sizes leave partial tiles (6 rows, 16 columns), blocks (72 rows, 128 columns) and k
    // blocks (256). And within a float64 bound of the exact product.
    struct Restore {
        ~Restore() {
            kernels::set_row_invariant_gemms(false);
            kernels::set_cpu_threads(threads);
        }

        int threads = kernels::cpu_threads();
    } restore;

    using kernels::cpu::Trans;
    kernels::set_row_invariant_gemms(true);
    const int64_t M = 203, N = 150, K = 600;
    std::vector<float> a(M * K), b(N * K), bias(N);
    for (size_t i = 0; i < a.size(); ++i)
        a[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < b.size(); ++i)
        b[i] = std::cos(0.11f * static_cast<float>(i));
    for (size_t i = 0; i < bias.size(); ++i)
        bias[i] = 0.01f * static_cast<float>(i);
    for (const Trans tb : {Trans::kYes, Trans::kNo}) {
        // op(B)[p][j]: b stored [N, K] for B^T, [K, N] for B.
        const int64_t ldb = tb == Trans::kYes ? K : N;
        const auto opb = [&](int64_t p, int64_t j) {
            return tb == Trans::kYes ? b[j * K + p] : b[p * N + j];
        };
        const auto gemm = [&](int64_t first, int64_t rows, float beta) {
            std::vector<float> c(static_cast<size_t>(rows * N));
            for (int64_t r = 0; r < rows; ++r)
                std::copy(bias.begin(), bias.end(), c.begin() + r * N);
            kernels::cpu::sgemm(Trans::kNo, tb, rows, N, K, a.data() + first * K, K, b.data(), ldb,
                                beta, c.data(), N);
            return c;
        };
        for (const float beta : {0.0f, 1.0f, 0.3f}) {
            INFO((tb == Trans::kYes ? "B^T" : "B") << ", beta " << beta);
            kernels::set_cpu_threads(2);
            const std::vector<float> all = gemm(0, M, beta);
            int64_t unequal = 0;
            double worst = 0;
            for (int64_t i = 0; i < M; ++i) {
                for (int64_t j = 0; j < N; ++j) {
                    float acc = 0.0f;
                    double exact = 0, mag = 0;
                    for (int64_t p = 0; p < K; ++p) {
                        acc = std::fma(a[i * K + p], opb(p, j), acc);
                        exact += static_cast<double>(a[i * K + p]) * opb(p, j);
                        mag += std::fabs(static_cast<double>(a[i * K + p]) * opb(p, j));
                    }
                    const float want = beta == 0.0f ? acc : acc + beta * bias[j];
                    const float got = all[i * N + j];
                    unequal += std::memcmp(&got, &want, sizeof(float)) != 0;
                    exact += beta * static_cast<double>(bias[j]);
                    worst = std::max(worst, std::fabs(got - exact) / (mag + 1.0));
                }
            }
            CHECK(unequal == 0);
            CHECK(worst <= K * 0x1p-24);
            for (const int threads : {1, 2}) {
                kernels::set_cpu_threads(threads);
                for (const auto& [first, rows] :
                     {std::pair<int64_t, int64_t>{64, 37}, {192, 11}, {100, 1}, {0, M}}) {
                    INFO(threads << " threads, rows " << first << " to " << first + rows);
                    const std::vector<float> part = gemm(first, rows, beta);
                    CHECK(std::memcmp(part.data(), all.data() + first * N,
                                      sizeof(float) * part.size()) == 0);
                }
            }
        }
    }
}

TEST_CASE("cuBLAS loads at a GPU's first GEMM, never for the CPU's", "[ops][cpu]") {
    // A CPU rank of a CUDA build runs its GEMMs without mapping cuBLAS (libcublasLt alone is
    // about 94 MB of anonymous memory once loaded); on the first GPU GEMM every entry point
    // shardrec calls resolves.
    const auto mapped = [](const std::string& library) {
        std::ifstream maps("/proc/self/maps");
        const std::string all((std::istreambuf_iterator<char>(maps)),
                              std::istreambuf_iterator<char>());
        return all.find(library) != std::string::npos;
    };
    const int64_t n = 64;
    std::vector<float> a(n * n, 0.5f), c(n * n);
    kernels::cpu::sgemm(kernels::cpu::Trans::kNo, kernels::cpu::Trans::kNo, n, n, n, a.data(), n,
                        a.data(), n, 0.0f, c.data(), n);
    CHECK(c[0] == 16.0f);
    CHECK_FALSE(kernels::cuda::cublas_loaded());
    CHECK_FALSE(mapped("libcublas"));
    int resolved = 0;
    const std::string error = test::error_of([&] { resolved = kernels::cuda::load_cublas(); });
    if (error.find("no CUDA definition in this build") != std::string::npos) {
        test::not_run("a build without CUDA");
        return;
    }
    INFO(error);
    REQUIRE(error.empty());
    CHECK(resolved == 16);
    CHECK(kernels::cuda::cublas_loaded());
    CHECK(mapped("libcublasLt.so"));
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
