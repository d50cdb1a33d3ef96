// SwishLayerNorm: shapes (2-D and a 3-D input normalised over the last dim), TorchRec names and
// initial gamma = 1, beta = 0, and gradients against finite differences of the reference.
#include <catch2/catch.hpp>

#include "engine/modules/swish_layer_norm.h"
#include "kernels/swish_layer_norm.h"
#include "test/modules/dense_gradcheck.h"
#include "test/reference/swish_layer_norm.h"

using namespace shardrec;
using namespace shardrec::test;

TEST_CASE("SwishLayerNorm: names, init, shapes and gradients", "[modules]") {
    SwishLayerNorm norm("over_arch.norm", 6);
    const std::vector<Parameter*> p = norm.parameters();
    REQUIRE(p.size() == 2);
    CHECK(p[0]->name == "over_arch.norm.norm.0.weight");
    CHECK(p[1]->name == "over_arch.norm.norm.0.bias");
    CHECK(p[0]->value.to_vector<float>() == std::vector<float>(6, 1.f));
    CHECK(p[1]->value.to_vector<float>() == std::vector<float>(6, 0.f));
    CHECK(norm.forward(random_input({2, 4, 6}, 1)).shape() == Shape{2, 4, 6});
    // Move gamma and beta off their initial values so their gradients are exercised.
    p[0]->value.copy_from(random_input({6}, 2, 0.5f, 1.5f));
    p[1]->value.copy_from(random_input({6}, 3));
    check_module_gradients(
        norm, random_input({3, 6}, 4),
        [](const std::vector<double>& x, const std::vector<std::vector<double>>& q) {
            return ref::swish_layer_norm_forward(x, q[0], q[1], kernels::kLayerNormEps, 3, 6)
                .y.value;
        });
}

TEST_CASE("SwishLayerNorm: a steady batch shape allocates nothing after the first step",
          "[modules]") {
    SwishLayerNorm norm("n", 16);
    check_steady_state_allocates_nothing(norm, random_input({9, 16}, 5));
}
