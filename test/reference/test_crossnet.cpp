// The cross layer reference (full and low rank) against central finite differences of its own
// forward, and the accumulation of grad_x0.
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "test/reference/crossnet.h"
#include "test/reference/finite_difference.h"
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

TEST_CASE("reference crossnet: backward matches finite differences", "[reference]") {
    const int64_t B = 3, N = 5;
    for (int64_t r : {0, 2}) {  // 0: full rank
        INFO("low rank " << r << " seed " << test::test_seed());
        const auto x0 = random_values(B * N, 1), xl = random_values(B * N, 2);
        const auto w = random_values(r == 0 ? N * N : N * r, 3);
        const auto v = r == 0 ? std::vector<double>{} : random_values(r * N, 4);
        const auto bias = random_values(N, 5), up = random_values(B * N, 6);
        const CrossNetForward f = crossnet_forward(x0, xl, w, v, bias, B, N, r);
        const CrossNetGrads g = crossnet_backward(x0, xl, w, v, f.u.value, f.vx.value, up,
                                                  std::vector<double>(B * N, 0.0), B, N, r);
        auto out = [&](const std::vector<double>& a, const std::vector<double>& b,
                       const std::vector<double>& c, const std::vector<double>& d,
                       const std::vector<double>& e) {
            return crossnet_forward(a, b, c, d, e, B, N, r).out.value;
        };
        using V = std::vector<double>;
        CHECK_RELATIVE(
            g.grad_x0.value,
            numerical_gradient([&](const V& t) { return out(t, xl, w, v, bias); }, x0, up), 1e-7);
        CHECK_RELATIVE(
            g.grad_xl.value,
            numerical_gradient([&](const V& t) { return out(x0, t, w, v, bias); }, xl, up), 1e-7);
        CHECK_RELATIVE(
            g.grad_w.value,
            numerical_gradient([&](const V& t) { return out(x0, xl, t, v, bias); }, w, up), 1e-7);
        CHECK_RELATIVE(
            g.grad_b.value,
            numerical_gradient([&](const V& t) { return out(x0, xl, w, v, t); }, bias, up), 1e-7);
        if (r > 0) {
            CHECK_RELATIVE(
                g.grad_v.value,
                numerical_gradient([&](const V& t) { return out(x0, xl, w, t, bias); }, v, up),
                1e-7);
        }
    }
}

TEST_CASE("reference crossnet: grad_x0 accumulates onto its initial value", "[reference]") {
    const std::vector<double> x0 = {1, 2}, xl = {3, 4}, w = {1, 0, 0, 1}, b = {0, 0};
    const CrossNetForward f = crossnet_forward(x0, xl, w, {}, b, 1, 2, 0);
    CHECK(f.out.value == std::vector<double>{1 * 3 + 3, 2 * 4 + 4});
    const CrossNetGrads g =
        crossnet_backward(x0, xl, w, {}, f.u.value, {}, {1, 1}, {10, 20}, 1, 2, 0);
    CHECK(g.grad_x0.value == std::vector<double>{13, 24});
}
