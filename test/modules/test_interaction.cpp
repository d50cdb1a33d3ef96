// The DLRM interaction archs: output widths, the dot interaction's column order, gradients wrt
// dense and sparse inputs (and the DCN cross net's parameters) against finite differences of the
// reference, and buffer reuse.
#include <catch2/catch.hpp>

#include "engine/modules/interaction.h"
#include "test/modules/dense_gradcheck.h"
#include "test/reference/crossnet.h"
#include "test/reference/dot_interaction.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using V = std::vector<double>;

TEST_CASE("InteractionArch: widths, column order and gradients", "[modules]") {
    const int64_t B = 3, F = 4, D = 5;
    InteractionArch arch(F, D);
    CHECK(arch.out_features() == D + F * (F + 1) / 2);
    const Tensor dense = random_input({B, D}, 1), sparse = random_input({B, F * D}, 2);
    const Tensor out = arch.forward(dense, sparse).clone();
    REQUIRE(out.shape() == Shape{B, D + 10});
    const V d64 = as_double(dense), s64 = as_double(sparse);
    CHECK_RELATIVE(as_double(out), ref::dot_interaction_forward(d64, s64, B, F, D).value, 1e-6);
    // Column D is T_1 . T_0 = emb_1 . dense of row 0.
    double dot10 = 0;
    for (int64_t d = 0; d < D; ++d) {
        dot10 += s64[d] * d64[d];
    }
    CHECK(std::fabs(out.to_vector<float>()[D] - dot10) < 1e-5);
    const Tensor up = random_input(out.shape(), 3);
    arch.backward(up);
    const V up64 = as_double(up);
    const auto fd = [&](const V& v) { return ref::dot_interaction_forward(v, s64, B, F, D).value; };
    const auto fs = [&](const V& v) { return ref::dot_interaction_forward(d64, v, B, F, D).value; };
    CHECK_RELATIVE(as_double(arch.grad_dense()), ref::numerical_gradient(fd, d64, up64), 1e-4);
    CHECK_RELATIVE(as_double(arch.grad_sparse()), ref::numerical_gradient(fs, s64, up64), 1e-4);
}

TEST_CASE("InteractionDCNArch: concat(dense, sparse) through LowRankCrossNet", "[modules]") {
    const int64_t B = 3, F = 2, D = 4, N = D * (F + 1), L = 2, r = 3;
    InteractionDCNArch arch("inter_arch.crossnet", F, D, L, r, 9);
    CHECK(arch.out_features() == N);
    std::vector<Parameter*> params = arch.parameters();
    REQUIRE(params.size() == 3 * L);
    CHECK(params[0]->name == "inter_arch.crossnet.W_kernels.0");
    for (size_t i = 2 * L; i < params.size(); ++i) {  // biases start at 0: move them
        params[i]->value.copy_from(random_input(params[i]->value.shape(), 20 + i));
    }
    const Tensor dense = random_input({B, D}, 4), sparse = random_input({B, F * D}, 5);
    std::vector<V> p64;
    for (Parameter* p : params) {
        p64.push_back(as_double(p->value));
    }
    // f(dense, sparse, params) in float64: concat per row, then the cross layers.
    auto f = [&](const V& d, const V& s, const std::vector<V>& q) {
        V x;
        for (int64_t b = 0; b < B; ++b) {
            x.insert(x.end(), d.begin() + b * D, d.begin() + (b + 1) * D);
            x.insert(x.end(), s.begin() + b * F * D, s.begin() + (b + 1) * F * D);
        }
        V xl = x;
        for (int64_t l = 0; l < L; ++l) {
            xl = ref::crossnet_forward(x, xl, q[l], q[L + l], q[2 * L + l], B, N, r).out.value;
        }
        return xl;
    };
    const V d64 = as_double(dense), s64 = as_double(sparse);
    const Tensor out = arch.forward(dense, sparse).clone();
    REQUIRE(out.shape() == Shape{B, N});
    CHECK_RELATIVE(as_double(out), f(d64, s64, p64), 1e-5);
    const Tensor up = random_input({B, N}, 6);
    const V up64 = as_double(up);
    arch.backward(up);
    CHECK_RELATIVE(as_double(arch.grad_dense()),
                   ref::numerical_gradient([&](const V& v) { return f(v, s64, p64); }, d64, up64),
                   1e-4);
    CHECK_RELATIVE(as_double(arch.grad_sparse()),
                   ref::numerical_gradient([&](const V& v) { return f(d64, v, p64); }, s64, up64),
                   1e-4);
    for (size_t i = 0; i < params.size(); ++i) {
        INFO(params[i]->name);
        const auto fp = [&](const V& v) {
            std::vector<V> q = p64;
            q[i] = v;
            return f(d64, s64, q);
        };
        CHECK_RELATIVE(as_double(params[i]->grad), ref::numerical_gradient(fp, p64[i], up64), 1e-4);
    }
}

TEST_CASE("interaction archs: a steady batch shape allocates nothing after the first step",
          "[modules]") {
    const int64_t B = 7, F = 3, D = 4;
    const Tensor dense = random_input({B, D}, 1), sparse = random_input({B, F * D}, 2);
    InteractionArch dot(F, D);
    InteractionDCNArch dcn("x", F, D, 2, 2, 1);
    const Tensor g_dot = random_input({B, dot.out_features()}, 3);
    const Tensor g_dcn = random_input({B, dcn.out_features()}, 4);
    for (int step = 0; step < 2; ++step) {
        dot.forward(dense, sparse);
        dot.backward(g_dot);
        dcn.forward(dense, sparse);
        dcn.backward(g_dcn);
    }
    const int64_t before = alloc_stats(DeviceType::kCpu).num_allocs;
    dot.forward(dense, sparse);
    dot.backward(g_dot);
    dcn.forward(dense, sparse);
    dcn.backward(g_dcn);
    CHECK(alloc_stats(DeviceType::kCpu).num_allocs == before);
}
