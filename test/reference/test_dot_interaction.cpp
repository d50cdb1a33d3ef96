// The dot interaction reference's backward against central finite differences, and its column
// order against a hand-built example.
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "test/reference/dot_interaction.h"
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

TEST_CASE("reference dot interaction: backward matches finite differences", "[reference]") {
    const int64_t B = 2, F = 3, D = 4, W = D + (F + 1) * F / 2;
    INFO("seed " << test::test_seed());
    const auto dense = random_values(B * D, 1), sparse = random_values(B * F * D, 2);
    const auto up = random_values(B * W, 3);
    const DotInteractionGrads g = dot_interaction_backward(dense, sparse, up, B, F, D);
    const auto fd = [&](const std::vector<double>& v) {
        return dot_interaction_forward(v, sparse, B, F, D).value;
    };
    const auto fs = [&](const std::vector<double>& v) {
        return dot_interaction_forward(dense, v, B, F, D).value;
    };
    CHECK_RELATIVE(g.grad_dense.value, numerical_gradient(fd, dense, up), 1e-7);
    CHECK_RELATIVE(g.grad_sparse.value, numerical_gradient(fs, sparse, up), 1e-7);
}

TEST_CASE("reference dot interaction: pairs follow the strictly lower triangle", "[reference]") {
    // D = 1, F = 2: T = [2, 3, 5]; pairs (1,0) (2,0) (2,1) = 6, 10, 15 after the dense value.
    const auto out = dot_interaction_forward({2}, {3, 5}, 1, 2, 1).value;
    CHECK(out == std::vector<double>{2, 6, 10, 15});
}
