// The BCE-with-logits reference: gradient against finite differences of the loss, and the
// stable form at large |x|.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/rng.h"
#include "test/reference/bce_with_logits.h"
#include "test/reference/finite_difference.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::ref;

TEST_CASE("reference bce with logits: gradient matches finite differences", "[reference]") {
    rng::Rng r(test::test_seed(), 1);
    std::vector<double> x(9), y(9);
    for (double& v : x) {
        v = r.uniform(-4.f, 4.f);
    }
    for (double& v : y) {
        v = r.uniform() < 0.5 ? 0.0 : 1.0;
    }
    y[0] = 0.25;  // soft label
    INFO("seed " << test::test_seed());
    const auto f = [&](const std::vector<double>& t) { return bce_with_logits(t, y).loss.value; };
    CHECK_RELATIVE(bce_with_logits(x, y).grad.value, numerical_gradient(f, x, {1.0}), 1e-7);
}

TEST_CASE("reference bce with logits: hand values and large logits", "[reference]") {
    CHECK(std::fabs(bce_with_logits({0.0}, {1.0}).loss.value[0] - std::log(2.0)) < 1e-15);
    // x = 100, y = 0: loss = 100 (+ e^-100); x = -100, y = 0: loss ~ e^-100
    const auto big = bce_with_logits({100.0, -100.0}, {0.0, 0.0});
    CHECK(std::fabs(big.loss.value[0] - 50.0) < 1e-12);
    CHECK(std::fabs(big.grad.value[0] - 0.5) < 1e-15);
    CHECK(std::fabs(big.grad.value[1]) < 1e-40);
}
