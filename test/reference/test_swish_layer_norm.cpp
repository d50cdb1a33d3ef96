// The SwishLayerNorm reference against central finite differences of its own forward (the
// backward consumes the saved mean and rstd, as the kernels do).
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/rng.h"
#include "test/reference/finite_difference.h"
#include "test/reference/swish_layer_norm.h"
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

}  // namespace

TEST_CASE("reference swish layer norm: backward matches finite differences", "[reference]") {
    const int64_t R = 3, N = 6;
    const double eps = 1e-5;
    INFO("seed " << test::test_seed());
    const V x = random_values(R * N, 1), gamma = random_values(N, 2), beta = random_values(N, 3);
    const V up = random_values(R * N, 4);
    const SwishLayerNormForward f = swish_layer_norm_forward(x, gamma, beta, eps, R, N);
    const SwishLayerNormGrads g =
        swish_layer_norm_backward(x, gamma, beta, f.mean.value, f.rstd.value, up, R, N);
    const auto fx = [&](const V& t) {
        return swish_layer_norm_forward(t, gamma, beta, eps, R, N).y.value;
    };
    const auto fg = [&](const V& t) {
        return swish_layer_norm_forward(x, t, beta, eps, R, N).y.value;
    };
    const auto fb = [&](const V& t) {
        return swish_layer_norm_forward(x, gamma, t, eps, R, N).y.value;
    };
    CHECK_RELATIVE(g.grad_x.value, numerical_gradient(fx, x, up), 1e-7);
    CHECK_RELATIVE(g.grad_gamma.value, numerical_gradient(fg, gamma, up), 1e-7);
    CHECK_RELATIVE(g.grad_beta.value, numerical_gradient(fb, beta, up), 1e-7);
}

TEST_CASE("reference swish layer norm: a hand-computed row", "[reference]") {
    // x = [1, 3]: mean 2, var 1, xhat = [-1, 1] (eps aside); gamma = 1, beta = 0
    const auto f = swish_layer_norm_forward({1, 3}, {1, 1}, {0, 0}, 0.0, 1, 2);
    CHECK(f.mean.value[0] == 2);
    CHECK(f.rstd.value[0] == 1);
    CHECK(std::fabs(f.y.value[0] - 1 / (1 + std::exp(1.0))) < 1e-15);
    CHECK(std::fabs(f.y.value[1] - 3 / (1 + std::exp(-1.0))) < 1e-15);
}
