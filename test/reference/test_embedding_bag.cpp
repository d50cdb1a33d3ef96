// The judge is checked too: the float64 embedding references against central finite differences
// of their own forwards, against TorchRec's worked example (seed_inventory 18.8), and the fused
// optimizer rules against hand-derived values.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/rng.h"
#include "test/reference/embedding_bag.h"
#include "test/reference/finite_difference.h"
#include "test/reference/sequence_embedding.h"
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

// T=2 tables (4 and 3 rows), D=3, F=3 with table 0 serving features 0 and 2, B=3, one empty bag,
// a duplicate id inside a bag and ids at 0 and E-1.
EmbeddingLookup small_lookup(bool weighted) {
    EmbeddingLookup a;
    a.dim = 3;
    a.table_offsets = {0, 4, 7};
    a.feature_table = {0, 1, 0};
    a.offsets = {0, 2, 2, 3, 5, 6, 8, 9, 11, 13};
    a.ids = {0, 3, 1, 2, 0, 2, 1, 1, 3, 3, 0, 2, 2};
    if (weighted) {
        a.per_sample_weights = random_values(a.ids.size(), 7);
    }
    return a;
}

}  // namespace

TEST_CASE("embedding_bag reference: backward matches finite differences of the forward",
          "[reference]") {
    for (const bool weighted : {false, true}) {
        for (const PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
            DYNAMIC_SECTION("weighted=" << weighted << " mode=" << pooling_mode_name(mode)) {
                EmbeddingLookup a = small_lookup(weighted);
                const std::vector<double> weights = random_values(7 * 3, 1);
                const std::vector<double> upstream = random_values(3 * 9, 2);
                const auto numeric = numerical_gradient(
                    [&](const std::vector<double>& w) {
                        return embedding_bag_forward(a, w, mode).value;
                    },
                    weights, upstream);
                const Values analytic = embedding_bag_backward(a, upstream, mode);
                CHECK_RELATIVE(analytic.value, numeric, 1e-8);

                if (!weighted) {
                    a.per_sample_weights.assign(a.ids.size(), 1.0);
                }
                const auto numeric_psw = numerical_gradient(
                    [&](const std::vector<double>& psw) {
                        EmbeddingLookup b = a;
                        b.per_sample_weights = psw;
                        return embedding_bag_forward(b, weights, mode).value;
                    },
                    a.per_sample_weights, upstream);
                const Values analytic_psw =
                    embedding_bag_backward_per_sample_weights(a, weights, upstream, mode);
                CHECK_RELATIVE(analytic_psw.value, numeric_psw, 1e-8);
            }
        }
    }
}

TEST_CASE("embedding_bag reference: mean of rows 1 and 3 matches TorchRec's worked example",
          "[reference]") {
    // seed_inventory 18.8: nn.EmbeddingBag(mode="mean") over ids [[1, 3]].
    EmbeddingLookup a;
    a.dim = 4;
    a.table_offsets = {0, 4};
    a.feature_table = {0};
    a.offsets = {0, 2};
    a.ids = {1, 3};
    std::vector<double> w(16, 0.0);
    const double row1[] = {0.3904, 0.6009, 0.2566, 0.7936};
    const double row3[] = {0.8694, 0.5677, 0.7411, 0.4294};
    for (int d = 0; d < 4; ++d) {
        w[4 + d] = row1[d];
        w[12 + d] = row3[d];
    }
    const Values out = embedding_bag_forward(a, w, PoolingMode::kMean);
    const double expected[] = {0.6299, 0.5843, 0.4988, 0.6115};
    for (int d = 0; d < 4; ++d) {
        CHECK(std::fabs(out.value[d] - expected[d]) < 1e-4);
    }
}

TEST_CASE("sequence_embedding reference: row gradients match finite differences", "[reference]") {
    const EmbeddingLookup a = small_lookup(false);
    const std::vector<double> weights = random_values(7 * 3, 3);
    const std::vector<double> upstream = random_values(a.ids.size() * 3, 4);
    const auto numeric = numerical_gradient(
        [&](const std::vector<double>& w) { return sequence_embedding_forward(a, w).value; },
        weights, upstream);
    const RowGradients rows = sequence_embedding_row_gradients(a, upstream);
    std::vector<double> analytic(weights.size(), 0.0);
    for (size_t u = 0; u < rows.rows.size(); ++u) {
        for (size_t d = 0; d < 3; ++d) {
            analytic[static_cast<size_t>(rows.rows[u]) * 3 + d] = rows.grad[u * 3 + d];
        }
    }
    CHECK_RELATIVE(analytic, numeric, 1e-8);
    CHECK(rows.max_count == 3);  // table 0 row 2 is looked up three times by feature 2
}

TEST_CASE("embedding_bag reference: fused optimizer rules on one row", "[reference]") {
    RowGradients g;
    g.rows = {1};
    g.grad = {3.0, -4.0};
    g.mag = {3.0, 4.0};
    const std::vector<double> w = {9, 9, 1.0, 2.0};
    kernels::FusedOptimizerParams o;
    o.learning_rate = 0.5f;
    o.eps = 0.f;
    SECTION("sgd") {
        o.type = kernels::OptimType::kSgd;
        const OptimizerUpdate u = fused_optimizer_update(g, o, 2, w, {}, {});
        CHECK(u.weights.value == std::vector<double>{9, 9, -0.5, 4.0});
    }
    SECTION("row-wise adagrad: G += mean(g^2) = 12.5 on top of 3.5, w -= lr g / 4") {
        o.type = kernels::OptimType::kExactRowWiseAdagrad;
        const OptimizerUpdate u = fused_optimizer_update(g, o, 2, w, {7.0, 3.5}, {});
        CHECK(u.state1.value == std::vector<double>{7.0, 16.0});
        CHECK(u.weights.value == std::vector<double>{9, 9, 1.0 - 0.375, 2.0 + 0.5});
    }
    SECTION("adagrad: per element G") {
        o.type = kernels::OptimType::kExactAdagrad;
        const OptimizerUpdate u = fused_optimizer_update(g, o, 2, w, {0, 0, 7.0, 0.0}, {});
        CHECK(u.state1.value == std::vector<double>{0, 0, 16.0, 16.0});
        CHECK(u.weights.value == std::vector<double>{9, 9, 1.0 - 0.375, 2.5});
    }
    SECTION("adam, first step from zero state: w -= lr sign(g); weight decay adds wd w") {
        o.type = kernels::OptimType::kAdam;
        const OptimizerUpdate u = fused_optimizer_update(g, o, 2, w, {0, 0, 0, 0}, {0, 0, 0, 0});
        CHECK(std::fabs(u.weights.value[2] - 0.5) < 1e-6);
        CHECK(std::fabs(u.weights.value[3] - 2.5) < 1e-6);
        CHECK(std::fabs(u.state1.value[2] - 0.3) < 1e-6);
        o.type = kernels::OptimType::kSgd;
        o.weight_decay = 0.25f;
        const OptimizerUpdate d = fused_optimizer_update(g, o, 2, w, {}, {});
        CHECK(d.weights.value[2] == 1.0 - 0.5 * (3.0 + 0.25));
    }
}
