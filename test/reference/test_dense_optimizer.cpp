// The dense optimizer references against values worked out by hand from the torch.optim rules.
#include <catch2/catch.hpp>
#include <cmath>

#include "test/reference/dense_optimizer.h"

using namespace shardrec::ref;

TEST_CASE("reference dense optimizers: one step by hand", "[reference]") {
    // SGD: p = 1 - 0.1 * (0.5 + 0.01 * 1) = 0.949
    CHECK(std::fabs(sgd_update({1.0}, {0.5}, 0.1, 0.01).value[0] - 0.949) < 1e-15);
    // Adagrad: s = 0 + 0.5^2; p = 1 - 0.1 * 0.5 / (0.5 + 1e-8)
    const AdagradResult a = adagrad_update({1.0}, {0.5}, {0.0}, 0.1, 1e-8, 0.0);
    CHECK(a.state_sum.value[0] == 0.25);
    CHECK(std::fabs(a.param.value[0] - (1 - 0.05 / (0.5 + 1e-8))) < 1e-15);
    // Adam, step 1: m = 0.1 g, v = 0.001 g^2; corrected m/(1-b1) = g, sqrt(v/(1-b2)) = |g|,
    // so p = 1 - lr * g / (|g| + eps) ~ 1 - lr.
    const AdamResult m = adam_update({1.0}, {0.5}, {0.0}, {0.0}, 0.01, 0.9, 0.999, 1e-8, 0.0, 1);
    CHECK(std::fabs(m.exp_avg.value[0] - 0.05) < 1e-15);
    CHECK(std::fabs(m.exp_avg_sq.value[0] - 0.00025) < 1e-15);
    CHECK(std::fabs(m.param.value[0] - (1 - 0.01 * 0.5 / (0.5 + 1e-8))) < 1e-12);
}
