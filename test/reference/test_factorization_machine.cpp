// The FactorizationMachine reference against central finite differences and a hand value.
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "test/reference/factorization_machine.h"
#include "test/reference/finite_difference.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::ref;

TEST_CASE("reference factorization machine: backward matches finite differences", "[reference]") {
    const int64_t B = 3, N = 7;
    rng::Rng r(test::test_seed(), 1);
    std::vector<double> x(B * N), up(B);
    for (double& v : x) {
        v = r.uniform(-1.f, 1.f);
    }
    for (double& v : up) {
        v = r.uniform(-1.f, 1.f);
    }
    INFO("seed " << test::test_seed());
    const auto g = factorization_machine_backward(x, up, B, N);
    const auto f = [&](const std::vector<double>& t) {
        return factorization_machine_forward(t, B, N).value;
    };
    CHECK_RELATIVE(g.value, numerical_gradient(f, x, up), 1e-7);
}

TEST_CASE("reference factorization machine: every scalar is a field", "[reference]") {
    // x = [1, 2, 3]: pairwise products 1*2 + 1*3 + 2*3 = 11
    CHECK(factorization_machine_forward({1, 2, 3}, 1, 3).value == std::vector<double>{11});
}
