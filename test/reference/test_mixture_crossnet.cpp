// The LowRankMixtureCrossNet reference against central finite differences, with and without the
// gate, for relu and sigmoid experts.
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "test/reference/finite_difference.h"
#include "test/reference/mixture_crossnet.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::ref;

namespace {

using V = std::vector<double>;

V random_values(size_t n, uint64_t stream) {
    rng::Rng r(test::test_seed(), stream);
    V v(n);
    for (double& x : v) {
        x = r.uniform(-1.f, 1.f);
    }
    return v;
}

MixtureCrossNetParams random_params(int64_t B, int64_t N, int64_t K, int64_t r, Act act) {
    MixtureCrossNetParams p;
    p.B = B, p.N = N, p.K = K, p.r = r, p.act = act;
    p.u = random_values(K * N * r, 10);
    p.c = random_values(K * r * r, 11);
    p.v = random_values(K * r * N, 12);
    p.bias = random_values(N, 13);
    if (K > 1) {
        p.gates = random_values(K * N, 14);
    }
    return p;
}

}  // namespace

TEST_CASE("reference mixture crossnet: backward matches finite differences", "[reference]") {
    const int64_t B = 3, N = 5, r = 2;
    for (int64_t K : {1, 3}) {
        for (Act act : {Act::kRelu, Act::kSigmoid}) {
            INFO("K " << K << " act " << static_cast<int>(act) << " seed " << test::test_seed());
            const MixtureCrossNetParams p = random_params(B, N, K, r, act);
            const V x0 = random_values(B * N, 1), xl = random_values(B * N, 2);
            const V up = random_values(B * N, 3);
            const MixtureCrossNetForward f = mixture_crossnet_forward(p, x0, xl);
            const MixtureCrossNetSavedValues s{f.a1.value, f.a2.value, f.e.value, f.probs.value};
            const MixtureCrossNetGrads g = mixture_crossnet_backward(
                p, x0, xl, s, up, V(B * N, 0.0), V(K > 1 ? K * N : 0, 0.0));
            auto with = [&](V MixtureCrossNetParams::*field) {
                return [&, field](const V& t) {
                    MixtureCrossNetParams q = p;
                    q.*field = t;
                    return mixture_crossnet_forward(q, x0, xl).out.value;
                };
            };
            const auto f_x0 = [&](const V& t) {
                return mixture_crossnet_forward(p, t, xl).out.value;
            };
            const auto f_xl = [&](const V& t) {
                return mixture_crossnet_forward(p, x0, t).out.value;
            };
            CHECK_RELATIVE(g.x0.value, numerical_gradient(f_x0, x0, up), 1e-7);
            CHECK_RELATIVE(g.xl.value, numerical_gradient(f_xl, xl, up), 1e-7);
            CHECK_RELATIVE(g.u.value, numerical_gradient(with(&MixtureCrossNetParams::u), p.u, up),
                           1e-7);
            CHECK_RELATIVE(g.c.value, numerical_gradient(with(&MixtureCrossNetParams::c), p.c, up),
                           1e-7);
            CHECK_RELATIVE(g.v.value, numerical_gradient(with(&MixtureCrossNetParams::v), p.v, up),
                           1e-7);
            CHECK_RELATIVE(g.bias.value,
                           numerical_gradient(with(&MixtureCrossNetParams::bias), p.bias, up),
                           1e-7);
            if (K > 1) {
                CHECK_RELATIVE(g.gates.value,
                               numerical_gradient(with(&MixtureCrossNetParams::gates), p.gates, up),
                               1e-7);
            }
        }
    }
}

TEST_CASE("reference mixture crossnet: one expert skips the gate", "[reference]") {
    // K = 1, r = 1, N = 1, identity: out = x0 * (u c v xl + b) + xl
    MixtureCrossNetParams p;
    p.B = 1, p.N = 1, p.K = 1, p.r = 1, p.act = Act::kIdentity;
    p.u = {2}, p.c = {3}, p.v = {5}, p.bias = {1};
    const auto f = mixture_crossnet_forward(p, {2}, {1});
    CHECK(f.out.value == std::vector<double>{2 * (2 * 3 * 5 * 1 + 1) + 1});
    CHECK(f.probs.value.empty());
}
