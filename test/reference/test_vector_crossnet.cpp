// The VectorCrossNet reference against central finite differences and TorchRec's bias-outside
// convention.
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "test/reference/finite_difference.h"
#include "test/reference/vector_crossnet.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::ref;

namespace {

std::vector<double> random_values(size_t n, uint64_t stream) {
    rng::Rng r(test::test_seed(), stream);
    std::vector<double> v(n);
    for (double& x : v) {
        x = r.uniform(-1.f, 1.f);
    }
    return v;
}

}  // namespace

TEST_CASE("reference vector crossnet: backward matches finite differences", "[reference]") {
    const int64_t B = 3, N = 5;
    INFO("seed " << test::test_seed());
    using V = std::vector<double>;
    const V x0 = random_values(B * N, 1), xl = random_values(B * N, 2), w = random_values(N, 3);
    const V bias = random_values(N, 4), up = random_values(B * N, 5);
    const VectorCrossNetForward f = vector_crossnet_forward(x0, xl, w, bias, B, N);
    const VectorCrossNetGrads g =
        vector_crossnet_backward(x0, xl, w, f.s.value, up, V(B * N, 0.0), B, N);
    auto out = [&](const V& a, const V& b, const V& c, const V& d) {
        return vector_crossnet_forward(a, b, c, d, B, N).out.value;
    };
    CHECK_RELATIVE(g.grad_x0.value,
                   numerical_gradient([&](const V& t) { return out(t, xl, w, bias); }, x0, up),
                   1e-7);
    CHECK_RELATIVE(g.grad_xl.value,
                   numerical_gradient([&](const V& t) { return out(x0, t, w, bias); }, xl, up),
                   1e-7);
    CHECK_RELATIVE(g.grad_w.value,
                   numerical_gradient([&](const V& t) { return out(x0, xl, t, bias); }, w, up),
                   1e-7);
    CHECK_RELATIVE(g.grad_b.value,
                   numerical_gradient([&](const V& t) { return out(x0, xl, w, t); }, bias, up),
                   1e-7);
}

TEST_CASE("reference vector crossnet: the bias is added outside the product", "[reference]") {
    // x0 = xl = [1, 2], w = [1, 1]: s = 3; out = x0 * 3 + b + xl with b = [10, 20]
    const auto f = vector_crossnet_forward({1, 2}, {1, 2}, {1, 1}, {10, 20}, 1, 2);
    CHECK(f.s.value == std::vector<double>{3});
    CHECK(f.out.value == std::vector<double>{1 * 3 + 10 + 1, 2 * 3 + 20 + 2});
}
