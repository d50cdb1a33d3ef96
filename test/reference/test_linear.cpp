// The linear reference's backward against central finite differences of its own forward, for
// every activation.
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "test/reference/finite_difference.h"
#include "test/reference/linear.h"
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

TEST_CASE("reference linear: backward matches finite differences", "[reference]") {
    const int64_t B = 3, I = 5, O = 4;
    for (Act act : {Act::kIdentity, Act::kRelu, Act::kSigmoid}) {
        INFO("act " << static_cast<int>(act) << " seed " << test::test_seed());
        const auto x = random_values(B * I, 1), w = random_values(O * I, 2);
        const auto bias = random_values(O, 3), up = random_values(B * O, 4);
        const auto y = linear_forward(x, w, bias, B, I, O, act).value;
        const LinearGrads g = linear_backward(x, w, y, up, B, I, O, act);
        const auto fx = [&](const std::vector<double>& v) {
            return linear_forward(v, w, bias, B, I, O, act).value;
        };
        const auto fw = [&](const std::vector<double>& v) {
            return linear_forward(x, v, bias, B, I, O, act).value;
        };
        const auto fb = [&](const std::vector<double>& v) {
            return linear_forward(x, w, v, B, I, O, act).value;
        };
        CHECK_RELATIVE(g.grad_x.value, numerical_gradient(fx, x, up), 1e-7);
        CHECK_RELATIVE(g.grad_w.value, numerical_gradient(fw, w, up), 1e-7);
        CHECK_RELATIVE(g.grad_b.value, numerical_gradient(fb, bias, up), 1e-7);
    }
}

TEST_CASE("reference linear: forward matches a hand-computed layer", "[reference]") {
    // x = [1, 2], w = [[1, -1], [0.5, 0.5]], b = [0.5, -2]: z = [-0.5, -0.5]
    const std::vector<double> x = {1, 2}, w = {1, -1, 0.5, 0.5}, b = {0.5, -2};
    CHECK(linear_forward(x, w, b, 1, 2, 2, Act::kIdentity).value ==
          std::vector<double>{-0.5, -0.5});
    CHECK(linear_forward(x, w, b, 1, 2, 2, Act::kRelu).value == std::vector<double>{0, 0});
    CHECK(linear_forward(x, w, {}, 1, 2, 2, Act::kRelu).value == std::vector<double>{0, 1.5});
    // mag is the sum of |terms|: |1*1| + |2*-1| + |0.5|
    CHECK(linear_forward(x, w, b, 1, 2, 2, Act::kIdentity).mag[0] == 3.5);
}
