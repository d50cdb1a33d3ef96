// EmbeddingBagCollection and PositionWeightedModule: TorchRec's worked examples (seed_inventory
// 18.5, 18.6, 18.8), KJT key handling, shared tables, pooling modes, deterministic init, the fused
// optimizer (touched rows only, duplicates aggregated, row-wise Adagrad against the float64
// reference), dense mode, determinism and no allocation in a repeated step.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/core/allocator.h"
#include "engine/core/rng.h"
#include "engine/modules/embedding_bag_collection.h"
#include "engine/modules/position_weighted.h"
#include "kernels/cpu/embedding_bag_update.h"
#include "kernels/embedding_bag.h"
#include "kernels/embedding_init.h"
#include "kernels/embedding_optimizer.h"
#include "test/reference/embedding_bag.h"
#include "test/support/compare.h"

using namespace shardrec;
using kernels::FusedOptimizerParams;
using kernels::OptimType;

namespace {

std::vector<double> doubles(const Tensor& t) {  // f32 tensor as float64
    const std::vector<float> v = t.to_vector<float>();
    return std::vector<double>(v.begin(), v.end());
}

KeyedJaggedTensor kjt(std::vector<std::string> keys,
                      std::vector<int64_t> values,
                      std::vector<int64_t> lengths,
                      std::vector<float> weights = {}) {
    std::optional<Tensor> w;
    if (!weights.empty()) {
        w = Tensor::from_vector(weights);
    }
    return KeyedJaggedTensor::from_lengths_sync(std::move(keys), Tensor::from_vector(values),
                                                Tensor::from_vector(lengths), w);
}

EmbeddingBagConfig table(std::string name,
                         int64_t rows,
                         int64_t dim,
                         std::vector<std::string> features,
                         PoolingMode pooling = PoolingMode::kSum,
                         DType dtype = DType::kF32) {
    return EmbeddingBagConfig{std::move(name), rows, dim, std::move(features), pooling, dtype};
}

FusedOptimizerParams optimizer(OptimType type, float lr) {
    FusedOptimizerParams o;
    o.type = type;
    o.learning_rate = lr;
    return o;
}

std::vector<float> row(const Tensor& weight, int64_t r) {
    const int64_t dim = weight.size(1);
    const float* p = weight.data<float>() + r * dim;
    return std::vector<float>(p, p + dim);
}

std::vector<float> column_block(const KeyedTensor& kt, int64_t b, int64_t key) {
    const int64_t cols = kt.values().size(1);
    const float* p =
        kt.values().data<float>() + b * cols + kt.offset_per_key()[static_cast<size_t>(key)];
    return std::vector<float>(p, p + kt.length_per_key()[static_cast<size_t>(key)]);
}

std::vector<float> sum_rows(const Tensor& w, const std::vector<int64_t>& rows) {
    std::vector<float> s(static_cast<size_t>(w.size(1)), 0.f);
    for (int64_t r : rows) {
        for (size_t d = 0; d < s.size(); ++d) {
            s[d] += row(w, r)[d];
        }
    }
    return s;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// The float64 reference's view of one table of a (weighted) EBC batch: the bags of `features`
// (name, first KT column) in that order, and in grad_out their [B, F*D] gradient columns.
ref::EmbeddingLookup table_lookup(const KeyedJaggedTensor& kjt_in,
                                  const std::vector<std::pair<std::string, int64_t>>& features,
                                  int64_t dim,
                                  int64_t rows,
                                  const Tensor& grad_values,
                                  std::vector<double>& grad_out) {
    ref::EmbeddingLookup a;
    a.dim = dim;
    a.table_offsets = {0, rows};
    a.offsets = {0};
    const int64_t batch = kjt_in.stride(), cols = grad_values.size(1);
    for (const auto& [name, column] : features) {
        const JaggedTensor jt = kjt_in[name];
        a.feature_table.push_back(0);
        for (int64_t n = 0; n < jt.num_values(); ++n) {
            a.ids.push_back(jt.values().data<int64_t>()[n]);
            a.per_sample_weights.push_back(jt.weights().data<float>()[n]);
        }
        for (int64_t b = 0; b < batch; ++b) {
            a.offsets.push_back(a.offsets.back() + jt.lengths().data<int64_t>()[b]);
        }
    }
    for (int64_t b = 0; b < batch; ++b) {
        for (const auto& [name, column] : features) {
            for (int64_t d = 0; d < dim; ++d) {
                grad_out.push_back(grad_values.data<float>()[b * cols + column + d]);
            }
        }
    }
    return a;
}

}  // namespace

TEST_CASE("EmbeddingBagCollection: TorchRec example 18.5 pools two tables into [3, 7]",
          "[modules]") {
    EmbeddingBagCollection ebc({table("t1", 10, 3, {"f1"}), table("t2", 10, 4, {"f2"})}, false, 7,
                               std::nullopt);
    // f1: [0,1], [], [2]; f2: [3], [4], [5,6,7]
    const KeyedTensor kt =
        ebc.forward(kjt({"f1", "f2"}, {0, 1, 2, 3, 4, 5, 6, 7}, {2, 0, 1, 1, 1, 3}));
    REQUIRE(kt.values().shape() == Shape{3, 7});
    CHECK(kt.keys() == std::vector<std::string>{"f1", "f2"});
    CHECK(kt.offset_per_key() == std::vector<int64_t>{0, 3, 7});
    CHECK(column_block(kt, 1, 0) == std::vector<float>{0, 0, 0});  // the empty bag
    CHECK(column_block(kt, 0, 0) == sum_rows(ebc.weight(0), {0, 1}));
    CHECK(column_block(kt, 2, 0) == sum_rows(ebc.weight(0), {2}));
    CHECK(column_block(kt, 2, 1) == sum_rows(ebc.weight(1), {5, 6, 7}));
}

TEST_CASE("EmbeddingBagCollection: keys are matched by name and a missing feature is an error",
          "[modules]") {
    EmbeddingBagCollection ebc({table("t1", 10, 3, {"f1"}), table("t2", 10, 3, {"f2"})}, false, 7,
                               std::nullopt);
    const Tensor a = ebc.forward(kjt({"f1", "f2"}, {0, 1, 2, 3}, {1, 1, 1, 1})).values().clone();
    const Tensor b =
        ebc.forward(kjt({"x", "f2", "f1"}, {9, 2, 3, 0, 1}, {1, 0, 1, 1, 1, 1})).values().clone();
    CHECK(bitwise_equal(a, b));
    CHECK_THROWS_WITH(ebc.forward(kjt({"f1"}, {0}, {1})), Catch::Contains("'f2'"));
    CHECK_THROWS_WITH(ebc.forward(kjt({"f1", "f2"}, {0, 10}, {1, 1})),
                      Catch::Contains("id 10 out of range [0, 10)"));
}

TEST_CASE("EmbeddingBagCollection: a shared table pools each of its features separately",
          "[modules]") {
    EmbeddingBagCollection ebc({table("t", 20, 4, {"a", "b"}), table("u", 5, 4, {"c"})}, false, 3,
                               std::nullopt);
    // a: [4, 7], []; b: [], [4, 7, 9]; c: [], [1]
    const KeyedTensor kt =
        ebc.forward(kjt({"a", "b", "c"}, {4, 7, 4, 7, 9, 1}, {2, 0, 0, 3, 0, 1}));
    CHECK(kt.keys() == std::vector<std::string>{"a", "b", "c"});
    CHECK(column_block(kt, 0, 0) == sum_rows(ebc.weight(0), {4, 7}));
    CHECK(column_block(kt, 1, 1) == sum_rows(ebc.weight(0), {4, 7, 9}));
    CHECK(column_block(kt, 1, 0) == std::vector<float>(4, 0.f));
    CHECK(column_block(kt, 1, 2) == sum_rows(ebc.weight(1), {1}));
}

TEST_CASE("EmbeddingBagCollection: MEAN matches nn.EmbeddingBag's example 18.8, weighted sums",
          "[modules]") {
    EmbeddingBagCollection ebc({table("t", 4, 4, {"f"}, PoolingMode::kMean)}, false, 1,
                               std::nullopt);
    const float r1[] = {0.3904f, 0.6009f, 0.2566f, 0.7936f},
                r3[] = {0.8694f, 0.5677f, 0.7411f, 0.4294f};
    Tensor w = ebc.weight(0);
    std::memcpy(w.data<float>() + 4, r1, sizeof(r1));
    std::memcpy(w.data<float>() + 12, r3, sizeof(r3));
    const KeyedTensor kt = ebc.forward(kjt({"f"}, {1, 3}, {2}));
    const float expected[] = {0.6299f, 0.5843f, 0.4988f, 0.6115f};
    for (int d = 0; d < 4; ++d) {
        CHECK(std::fabs(kt.values().data<float>()[d] - expected[d]) < 1e-4);
    }

    EmbeddingBagCollection weighted({table("t", 4, 2, {"f"})}, true, 1, std::nullopt);
    const KeyedTensor s = weighted.forward(kjt({"f"}, {1, 3}, {2}, {0.5f, 2.f}));
    for (int d = 0; d < 2; ++d) {
        const float want = 0.f + 0.5f * row(weighted.weight(0), 1)[static_cast<size_t>(d)] +
                           2.f * row(weighted.weight(0), 3)[static_cast<size_t>(d)];
        CHECK(s.values().data<float>()[d] == want);
    }
    CHECK_THROWS_WITH(weighted.forward(kjt({"f"}, {1}, {1})), Catch::Contains("no weights"));
}

TEST_CASE("EmbeddingBagCollection: rows depend only on (seed, table index, row)", "[modules]") {
    EmbeddingBagCollection two({table("a", 50, 8, {"fa"}), table("b", 30, 8, {"fb"})}, false, 5,
                               std::nullopt);
    EmbeddingBagCollection one({table("a", 50, 8, {"fa"})}, false, 5, std::nullopt);
    EmbeddingBagCollection other_seed({table("a", 50, 8, {"fa"})}, false, 6, std::nullopt);
    CHECK(bitwise_equal(two.weight(0), one.weight(0)));
    CHECK_FALSE(bitwise_equal(one.weight(0), other_seed.weight(0)));
    const float bound = std::sqrt(1.f / 30.f);
    for (int64_t r = 0; r < 30; ++r) {
        for (int64_t c = 0; c < 8; ++c) {
            const float v = two.weight(1).data<float>()[r * 8 + c];
            CHECK(v == kernels::embedding_init_value(5, 1, r, c, 30));
            CHECK(std::fabs(v) <= bound);
        }
    }
}

TEST_CASE("EmbeddingBagCollection: fused SGD changes exactly the touched rows", "[modules]") {
    EmbeddingBagCollection ebc({table("t", 16, 4, {"f"}), table("u", 8, 2, {"g"})}, false, 2,
                               optimizer(OptimType::kSgd, 0.5f));
    const Tensor before = ebc.weight(0).clone();
    const Tensor before_u = ebc.weight(1).clone();
    ebc.forward(kjt({"f", "g"}, {3, 9, 3}, {2, 1, 0, 0}));  // f: [3, 9], [3]; g: empty
    Tensor grad = Tensor::zeros({2, 6}, DType::kF32);
    for (int64_t i = 0; i < 12; ++i) {
        grad.data<float>()[i] = static_cast<float>(i % 6 + 1);
    }
    ebc.backward(grad);
    CHECK(bitwise_equal(ebc.weight(1), before_u));  // no id of g: untouched
    for (int64_t r = 0; r < 16; ++r) {
        const std::vector<float> now = row(ebc.weight(0), r), was = row(before, r);
        for (size_t d = 0; d < 4; ++d) {
            const float g = static_cast<float>(d + 1);
            const float want = r == 3   ? was[d] - 0.5f * (g + g)
                               : r == 9 ? was[d] - 0.5f * g
                                        : was[d];
            CHECK(now[d] == want);
        }
    }
    CHECK(ebc.fused_optimizer().step == 2);
}

TEST_CASE("EmbeddingBagCollection: two equal ids in a bag update like one id of weight 2",
          "[modules]") {
    EmbeddingBagCollection twice({table("t", 10, 5, {"f"})}, true, 4,
                                 optimizer(OptimType::kSgd, 0.25f));
    EmbeddingBagCollection doubled({table("t", 10, 5, {"f"})}, true, 4,
                                   optimizer(OptimType::kSgd, 0.25f));
    Tensor grad = Tensor::from_vector<float>({0.3f, -1.1f, 0.7f, 2.f, -0.25f}, {1, 5});
    twice.forward(kjt({"f"}, {6, 6}, {2}, {1.f, 1.f}));
    twice.backward(grad);
    doubled.forward(kjt({"f"}, {6}, {1}, {2.f}));
    doubled.backward(grad);
    CHECK(bitwise_equal(twice.weight(0), doubled.weight(0)));
}

TEST_CASE("EmbeddingBagCollection: fused row-wise Adagrad matches the float64 reference",
          "[modules]") {
    // Two groups (dims 6 and 3), a shared table, MEAN and weighted, a hot row.
    std::vector<EmbeddingBagConfig> tables{table("a", 40, 6, {"fa", "fb"}, PoolingMode::kMean),
                                           table("b", 25, 3, {"fc"}),
                                           table("c", 30, 6, {"fd"}, PoolingMode::kMean)};
    FusedOptimizerParams o = optimizer(OptimType::kExactRowWiseAdagrad, 0.05f);
    o.eps = 1e-3f;
    EmbeddingBagCollection ebc(tables, true, 11, o);
    rng::Rng r(test::test_seed(), 5);
    const int64_t batch = 16;
    std::vector<int64_t> values, lengths;
    std::vector<float> weights;
    for (int64_t f = 0; f < 4; ++f) {
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t length = r.randint(0, 5);
            lengths.push_back(length);
            for (int64_t i = 0; i < length; ++i) {
                values.push_back(i == 0 ? 7 : r.randint(0, 25));
                weights.push_back(r.uniform(0.5f, 1.5f));
            }
        }
    }
    const KeyedJaggedTensor features = kjt({"fd", "fa", "fc", "fb"}, values, lengths, weights);
    std::vector<std::vector<double>> w0, s0;
    for (int64_t t = 0; t < 3; ++t) {
        w0.push_back(doubles(ebc.weight(t)));
        s0.push_back(doubles(ebc.optimizer_state(t)[0]));
    }
    ebc.forward(features);
    Tensor grad = Tensor::empty({batch, 21}, DType::kF32);
    for (int64_t i = 0; i < grad.numel(); ++i) {
        grad.data<float>()[i] = r.uniform(-1.f, 1.f);
    }
    ebc.backward(grad);
    // Reference per table: its features' bags and KT columns (fa 0, fb 6, fc 12, fd 15).
    const std::vector<std::vector<std::pair<std::string, int64_t>>> table_features{
        {{"fa", 0}, {"fb", 6}}, {{"fc", 12}}, {{"fd", 15}}};
    for (int64_t t = 0; t < 3; ++t) {
        const int64_t dim = tables[static_cast<size_t>(t)].embedding_dim;
        std::vector<double> g;
        const ref::EmbeddingLookup a =
            table_lookup(features, table_features[static_cast<size_t>(t)], dim,
                         tables[static_cast<size_t>(t)].num_embeddings, grad, g);
        const ref::RowGradients rg =
            ref::embedding_bag_row_gradients(a, g, tables[static_cast<size_t>(t)].pooling);
        const ref::OptimizerUpdate u = ref::fused_optimizer_update(
            rg, o, dim, w0[static_cast<size_t>(t)], s0[static_cast<size_t>(t)], {});
        test::Tolerance tol;
        tol.terms = rg.max_count + 2 + 8 + dim;
        const auto cw = test::compare(ebc.weight(t), u.weights.value, u.weights.mag, tol);
        INFO("table " << t << " weights: " << cw.report);
        CHECK(cw.ok);
        const auto cs = test::compare(ebc.optimizer_state(t)[0], u.state1.value, u.state1.mag, tol);
        INFO("table " << t << " state: " << cs.report);
        CHECK(cs.ok);
    }
}

TEST_CASE(
    "EmbeddingBagCollection: Adagrad and row-wise Adagrad start from initial_accumulator_value "
    "(first update against the float64 reference)",
    "[modules]") {
    const double g0 = 0.75;  // far from 0, where the first step would be about lr * sign(g)
    for (const OptimType type : {OptimType::kExactAdagrad, OptimType::kExactRowWiseAdagrad}) {
        INFO(kernels::optim_type_name(type));
        FusedOptimizerParams o = optimizer(type, 0.1f);
        o.initial_accumulator_value = static_cast<float>(g0);
        const int64_t rows = 12, dim = 4;
        EmbeddingBagCollection ebc({table("t", rows, dim, {"f"})}, true, 3, o);
        const std::vector<double> w0 = doubles(ebc.weight(0));
        const std::vector<double> s0(
            static_cast<size_t>(type == OptimType::kExactAdagrad ? rows * dim : rows),
            g0);  // the state as the rule defines it, not as read back
        const KeyedJaggedTensor features = kjt({"f"}, {2, 7, 2, 11, 0}, {2, 0, 3}, {1, 1, 1, 1, 1});
        ebc.forward(features);
        Tensor grad = Tensor::empty({3, dim}, DType::kF32);
        for (int64_t i = 0; i < grad.numel(); ++i) {
            grad.data<float>()[i] = std::cos(0.9f * static_cast<float>(i));
        }
        ebc.backward(grad);
        std::vector<double> g;
        const ref::EmbeddingLookup a = table_lookup(features, {{"f", 0}}, dim, rows, grad, g);
        const ref::RowGradients rg = ref::embedding_bag_row_gradients(a, g, PoolingMode::kSum);
        const ref::OptimizerUpdate u = ref::fused_optimizer_update(rg, o, dim, w0, s0, {});
        test::Tolerance tol;
        tol.terms = rg.max_count + 2 + 8 + dim;
        const auto cw = test::compare(ebc.weight(0), u.weights.value, u.weights.mag, tol);
        INFO("weights: " << cw.report);
        CHECK(cw.ok);
        const auto cs = test::compare(ebc.optimizer_state(0)[0], u.state1.value, u.state1.mag, tol);
        INFO("state: " << cs.report);
        CHECK(cs.ok);
        // Row 5 was not touched: its state keeps the initial value exactly.
        const Tensor state = ebc.optimizer_state(0)[0];
        CHECK(state.data<float>()[type == OptimType::kExactAdagrad ? 5 * dim : 5] == 0.75f);
    }
}

TEST_CASE(
    "EmbeddingBagCollection: steps are bitwise deterministic and allocate nothing when "
    "the shape repeats",
    "[modules]") {
    auto make = [] {
        return EmbeddingBagCollection({table("a", 100, 8, {"x", "y"}), table("b", 60, 4, {"z"})},
                                      true, 9, optimizer(OptimType::kAdam, 0.01f));
    };
    EmbeddingBagCollection first = make(), second = make();
    Tensor grad = Tensor::empty({4, 20}, DType::kF32);
    for (int64_t i = 0; i < grad.numel(); ++i) {
        grad.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
    }
    auto batch = [](int64_t shift) {
        const std::vector<int64_t> ids{1, 5, 5, 9, 2, 7, 3, 3, 40, 50, 1, 2};
        std::vector<int64_t> v;
        for (int64_t id : ids) {
            v.push_back((id + shift) % 60);
        }
        return kjt({"z", "y", "x"}, v, {1, 0, 2, 1, 1, 2, 0, 1, 1, 1, 1, 1},
                   {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    };
    auto step = [&](EmbeddingBagCollection& ebc, const KeyedJaggedTensor& features) {
        ebc.forward(features);
        ebc.backward(grad);
    };
    const KeyedJaggedTensor batch0 = batch(0), batch1 = batch(3);
    step(first, batch0);
    step(second, batch0);
    const int64_t allocs = alloc_stats(DeviceType::kCpu).num_allocs;
    step(first, batch1);  // same shape, other ids
    CHECK(alloc_stats(DeviceType::kCpu).num_allocs == allocs);
    step(second, batch1);
    for (int64_t t = 0; t < 2; ++t) {
        CHECK(bitwise_equal(first.weight(t), second.weight(t)));
        CHECK(bitwise_equal(first.optimizer_state(t)[1], second.optimizer_state(t)[1]));
    }
}

TEST_CASE("EmbeddingBagCollection: dense mode writes the reference gradient per table",
          "[modules]") {
    EmbeddingBagCollection ebc({table("t", 12, 3, {"a", "b"})}, false, 1, std::nullopt);
    REQUIRE(ebc.parameters().size() == 1);
    CHECK(ebc.parameters()[0]->name == "embedding_bags.t.weight");
    ebc.forward(kjt({"a", "b"}, {1, 1, 4, 11, 1}, {2, 1, 0, 2}));
    Tensor grad = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 6});
    ebc.backward(grad);
    ref::EmbeddingLookup a;
    a.dim = 3;
    a.table_offsets = {0, 12};
    a.feature_table = {0, 0};
    a.ids = {1, 1, 4, 11, 1};
    a.offsets = {0, 2, 3, 3, 5};
    const ref::Values want = ref::embedding_bag_backward(a, doubles(grad), PoolingMode::kSum);
    test::Tolerance exact;
    exact.exact = true;  // integer gradients: the sums are exact
    const auto c = test::compare(ebc.weight_grad(0), want.value, want.mag, exact);
    INFO(c.report);
    CHECK(c.ok);
    CHECK(bitwise_equal(ebc.parameters()[0]->grad, ebc.weight_grad(0)));
}

TEST_CASE("PositionWeightedModule: TorchRec example 18.6 starts every weight at 1", "[modules]") {
    PositionWeightedModule pw({{"F0", 3}, {"F1", 3}, {"F2", 3}});
    const KeyedJaggedTensor out = pw.forward(kjt(
        {"F0", "F1", "F2"}, {0, 1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7}, {2, 0, 1, 1, 1, 3, 2, 3, 0}));
    REQUIRE(out.has_weights());
    CHECK(out.weights().to_vector<float>() == std::vector<float>(13, 1.f));
    CHECK(out.lengths().to_vector<int64_t>() == std::vector<int64_t>{2, 0, 1, 1, 1, 3, 2, 3, 0});
    CHECK(pw.parameters().size() == 3);
    CHECK(pw.parameters()[1]->name == "position_weights.F1");
    CHECK_THROWS_WITH(pw.forward(kjt({"F0"}, {1, 2, 3, 4}, {4})), Catch::Contains("max length 3"));
}

TEST_CASE("PositionWeightedModule: position-weight gradients through a weighted EBC", "[modules]") {
    PositionWeightedModule pw({{"a", 3}});
    float* p = pw.parameters()[0]->value.data<float>();
    p[1] = 0.5f;
    p[2] = -2.f;
    // B = 2. b: [3], []; a: [2, 5, 5], [1]. Only a is position weighted (b keeps weight 1).
    const KeyedJaggedTensor in = pw.forward(kjt({"b", "a"}, {3, 2, 5, 5, 1}, {1, 0, 3, 1}));
    CHECK(in.weights().to_vector<float>() == std::vector<float>{1, 1, 0.5f, -2, 1});
    std::vector<float> dense_grad;
    for (const bool fused : {false, true}) {
        auto opt = fused ? std::optional(optimizer(OptimType::kSgd, 1.f)) : std::nullopt;
        EmbeddingBagCollection ebc({table("t", 8, 4, {"a"}, PoolingMode::kMean)}, true, 3, opt);
        const Tensor rows = ebc.weight(0).clone();
        ebc.forward(in);
        const Tensor grad = Tensor::from_vector<float>({1, -2, 3, 0.5f, -1, 4, 2, 1}, {2, 4});
        ebc.backward(grad);
        // d loss / d w_n = dot(grad of n's bag, row(id_n)) / L; value 0 belongs to b: 0.
        const std::vector<float> got = ebc.grad_per_sample_weights().to_vector<float>();
        REQUIRE(got.size() == 5);
        CHECK(got[0] == 0.f);
        const int64_t id[] = {2, 5, 5, 1}, sample[] = {0, 0, 0, 1}, length[] = {3, 1};
        for (size_t n = 0; n < 4; ++n) {
            double dot = 0;
            for (int64_t d = 0; d < 4; ++d) {
                dot += static_cast<double>(grad.data<float>()[sample[n] * 4 + d]) *
                       rows.data<float>()[id[n] * 4 + d];
            }
            const double want = dot / static_cast<double>(length[sample[n]]);
            CHECK(std::fabs(got[n + 1] - want) <= 1e-6 * (1 + std::fabs(want)));
        }
        if (fused) {
            CHECK(got == dense_grad);  // computed before the fused update moved the rows
        } else {
            dense_grad = got;
        }
        pw.backward(ebc.grad_per_sample_weights());
        const std::vector<float> pg = pw.parameters()[0]->grad.to_vector<float>();
        CHECK(pg[0] == got[1] + got[4]);  // position 0 of both bags
        CHECK(pg[1] == got[2]);
        CHECK(pg[2] == got[3]);
    }
}

TEST_CASE("EmbeddingBagCollection: position-weighted tables next to data-weighted ones",
          "[modules]") {
    // "pos" (features a) has position weights for 3 positions; "dat" (feature b) carries the
    // data's weights. B = 2. a: [4, 1, 1], [2]; b: [0], [3, 5].
    EmbeddingBagConfig pos = table("pos", 6, 2, {"a"});
    pos.position_weights = 3;
    EmbeddingBagCollection ebc({pos, table("dat", 7, 2, {"b"})}, /*is_weighted=*/true, 5,
                               std::nullopt);
    const std::vector<Parameter*> params = ebc.parameters();
    REQUIRE(params.size() == 3);  // dense mode: two tables, then the position weights
    REQUIRE(params[2]->name == "position_weights.a");
    float* pw = params[2]->value.data<float>();
    pw[0] = 0.5f;
    pw[1] = -1.f;
    pw[2] = 2.f;
    const KeyedJaggedTensor in =
        kjt({"a", "b"}, {4, 1, 1, 2, 0, 3, 5}, {3, 1, 1, 2}, {9, 9, 9, 9, 0.25f, 2, -3});
    const KeyedTensor out = ebc.forward(in);
    const Tensor& wa = ebc.weight(0);
    const Tensor& wb = ebc.weight(1);
    for (int64_t d = 0; d < 2; ++d) {
        // The data's weights of a are replaced by the position weights; b keeps its own.
        CHECK(column_block(out, 0, 0)[static_cast<size_t>(d)] ==
              Approx(0.5 * row(wa, 4)[d] - row(wa, 1)[d] + 2 * row(wa, 1)[d]));
        CHECK(column_block(out, 1, 0)[static_cast<size_t>(d)] == Approx(0.5 * row(wa, 2)[d]));
        CHECK(column_block(out, 0, 1)[static_cast<size_t>(d)] == Approx(0.25 * row(wb, 0)[d]));
        CHECK(column_block(out, 1, 1)[static_cast<size_t>(d)] ==
              Approx(2 * row(wb, 3)[d] - 3 * row(wb, 5)[d]));
    }
    const Tensor grad = Tensor::from_vector<float>({1, 2, 3, 4, -1, 0.5f, 2, -2}, {2, 4});
    ebc.backward(grad);
    // d loss / d pw[j] = sum over the ids at position j of dot(grad of the bag's a columns, row).
    auto dot = [&](int64_t b, int64_t r) {
        return grad.data<float>()[b * 4] * row(wa, r)[0] +
               grad.data<float>()[b * 4 + 1] * row(wa, r)[1];
    };
    const std::vector<float> g = params[2]->grad.to_vector<float>();
    CHECK(g[0] == Approx(dot(0, 4) + dot(1, 2)));
    CHECK(g[1] == Approx(dot(0, 1)));
    CHECK(g[2] == Approx(dot(0, 1)));
    // A longer bag than the position weights cover names the feature and the sample.
    CHECK_THROWS_WITH(
        ebc.forward(kjt({"a", "b"}, {1, 2, 3, 4, 0}, {0, 4, 1, 0}, {1, 1, 1, 1, 1})),
        Catch::Contains("feature 'a' sample 1 has 4 ids, more than its max length 3"));
}

TEST_CASE("embedding_bag kernels: rows past 2^31 elements are addressed with 64-bit math",
          "[modules][ops]") {
    // [2^24 + 2, 128] f32 is 2^31 + 256 elements (8 GiB of address space). Only the pages of the
    // rows written here are ever touched, so the test costs a few MiB of memory.
    const int64_t rows = (int64_t{1} << 24) + 2, dim = 128;
    Tensor w = Tensor::empty({rows, dim}, DType::kF32);
    float* last = w.data<float>() + (rows - 1) * dim;  // element offset 2^31 + 128
    float* before = w.data<float>() + (rows - 2) * dim;
    for (int64_t d = 0; d < dim; ++d) {
        last[d] = static_cast<float>(d + 1);
        before[d] = static_cast<float>(2 * d);
    }
    const Tensor table_offsets = Tensor::from_vector<int64_t>({0, 8, rows});
    const Tensor feature_table = Tensor::from_vector<int32_t>({1});
    const Tensor ids = Tensor::from_vector<int64_t>({rows - 9, rows - 10});  // local to table 1
    const Tensor offsets = Tensor::from_vector<int64_t>({0, 2});
    Tensor out = Tensor::empty({1, dim}, DType::kF32);
    kernels::embedding_bag_forward(w, table_offsets, feature_table, ids, offsets, nullptr,
                                   PoolingMode::kSum, out, Stream::cpu());
    for (int64_t d = 0; d < dim; ++d) {
        CHECK(out.data<float>()[d] == static_cast<float>(3 * d + 1));
    }
    Tensor grad = Tensor::empty({1, dim}, DType::kF32);
    for (int64_t d = 0; d < dim; ++d) {
        grad.data<float>()[d] = 1.f;
    }
    kernels::EmbeddingBackwardWorkspace workspace;
    kernels::embedding_bag_backward_fused(grad, table_offsets, feature_table, ids, offsets, nullptr,
                                          PoolingMode::kSum, optimizer(OptimType::kSgd, 0.5f), w,
                                          nullptr, nullptr, workspace, Stream::cpu());
    for (int64_t d = 0; d < dim; ++d) {
        CHECK(last[d] == static_cast<float>(d) + 0.5f);
        CHECK(before[d] == static_cast<float>(2 * d) - 0.5f);
    }
}

TEST_CASE("embedding_bag kernels: a large batch's row sort, on the threads, is the stable sort",
          "[modules][ops]") {
    // More ids than the size from which the radix passes run on the threads; rows of 22 bits (two
    // passes of 11) drawn from 5000 values, so most rows repeat and their id order is checked.
    namespace detail = kernels::cpu::detail;
    const int64_t n = (int64_t{1} << 17) + 12345, num_rows = int64_t{1} << 22;
    kernels::EmbeddingBackwardWorkspace workspace;
    const detail::RowContributions c = detail::alloc_contributions(n, workspace);
    for (int64_t i = 0; i < n; ++i) {
        c.rows[i] = static_cast<int64_t>(rng::hash(3, static_cast<uint64_t>(i)) % 5000) * 838;
    }
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return c.rows[a] < c.rows[b]; });
    const detail::RowSegments sg = detail::sort_by_row(c, num_rows, workspace);
    int64_t wrong = 0, segments = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t i = order[static_cast<size_t>(k)];
        wrong += sg.row(k) != c.rows[i] || sg.index(k) != i ? 1 : 0;
        if (k == 0 || c.rows[i] != c.rows[order[static_cast<size_t>(k) - 1]]) {
            wrong += sg.begin[segments++] != k ? 1 : 0;
        }
    }
    CHECK(wrong == 0);
    CHECK(sg.num_segments == segments);
}

TEST_CASE("embedding_bag kernels: the inline f16 load matches half_to_float on every value",
          "[modules][ops]") {
    int64_t mismatches = 0;
    for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
        const Half h{static_cast<uint16_t>(bits)};
        const float fast = kernels::cpu::detail::load_f32(h), core = half_to_float(h);
        mismatches += std::memcmp(&fast, &core, 4) != 0 ? 1 : 0;
    }
    CHECK(mismatches == 0);
}

TEST_CASE("embedding_bag kernels: the vector f16 and bf16 loads match the scalar on every value",
          "[modules][ops]") {
    if (!kernels::cpu::detail::vector_loads()) {
        test::not_run(
            "this CPU has neither AVX-512 nor AVX2 with F16C: the lookup uses the "
            "scalar loads only");
        return;
    }
    std::vector<Half> h(0x10000);
    std::vector<BFloat16> b(0x10000);
    for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
        h[bits] = Half{static_cast<uint16_t>(bits)};
        b[bits] = BFloat16{static_cast<uint16_t>(bits)};
    }
    std::vector<float> hv(0x10000), bv(0x10000);
    kernels::cpu::detail::load_f32_vector(h.data(), hv.data(), 0x10000);
    kernels::cpu::detail::load_f32_vector(b.data(), bv.data(), 0x10000);
    int64_t mismatches = 0;
    for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
        const float hs = kernels::cpu::detail::load_f32(h[bits]);
        const float bs = kernels::cpu::detail::load_f32(b[bits]);
        mismatches += std::memcmp(&hs, &hv[bits], 4) != 0 ? 1 : 0;
        mismatches += std::memcmp(&bs, &bv[bits], 4) != 0 ? 1 : 0;
    }
    CHECK(mismatches == 0);
}

TEST_CASE(
    "embedding_bag kernels: the fused update of f16 and bf16 rows gives the scalar path's bits",
    "[modules][ops]") {
    if (!kernels::cpu::detail::vector_loads()) {
        test::not_run(
            "this CPU has neither AVX-512 nor AVX2 with F16C: the update converts "
            "with the scalar loads and stores only");
        return;
    }
    // D = 83: 80 columns converted by the vector loads and stores, a 3-column tail; every rule,
    // with weight decay (which reads the weights before the rule) and without; weights in
    // [-4, 4), one in 16 of any bit pattern but NaN (infinities, subnormals, huge values: a NaN
    // weight stays NaN, its payload the rule's business).
    constexpr int64_t kRows = 40, kDim = 83, kBatch = 16;
    rng::Rng rng(11);
    std::vector<int64_t> ids, offsets{0};
    for (int64_t bag = 0; bag < kBatch; ++bag) {
        for (int64_t i = 0; i < 1 + bag % 4; ++i)
            ids.push_back(static_cast<int64_t>(rng.next_u64() % kRows));
        offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    const Tensor table_offsets = Tensor::from_vector<int64_t>({0, kRows});
    const Tensor feature_table = Tensor::from_vector<int32_t>({0});
    const Tensor ids_t = Tensor::from_vector(ids), offsets_t = Tensor::from_vector(offsets);
    Tensor grad = Tensor::empty({kBatch, kDim}, DType::kF32);
    for (int64_t i = 0; i < grad.numel(); ++i)
        grad.data<float>()[i] = static_cast<float>(rng.uniform(-2.f, 2.f));
    for (DType dtype : {DType::kF16, DType::kBF16}) {
        Tensor w0 = Tensor::empty({kRows, kDim}, dtype);
        auto* bits = static_cast<uint16_t*>(w0.data_ptr());
        for (int64_t i = 0; i < w0.numel(); ++i) {
            const uint64_t r = rng.next_u64();
            const float x = rng.uniform(-4.f, 4.f);
            uint16_t b = dtype == DType::kF16 ? float_to_half(x).bits : float_to_bf16(x).bits;
            if (r % 16 == 0) {
                b = static_cast<uint16_t>(r >> 16);
                const bool nan = dtype == DType::kF16 ? (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0
                                                      : (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
                if (nan)
                    b = static_cast<uint16_t>(b & 0x3fff);
            }
            bits[i] = b;
        }
        using kernels::OptimType;
        for (OptimType type : {OptimType::kSgd, OptimType::kExactAdagrad,
                               OptimType::kExactRowWiseAdagrad, OptimType::kAdam}) {
            for (float decay : {0.f, 0.01f}) {
                kernels::FusedOptimizerParams optim;
                optim.type = type;
                optim.learning_rate = 0.5f;
                optim.weight_decay = decay;
                Tensor got[2];
                for (int scalar = 0; scalar < 2; ++scalar) {
                    got[scalar] = w0.clone();
                    Tensor s1, s2;
                    kernels::make_optimizer_states(optim, kRows, kDim, s1, s2);
                    kernels::EmbeddingBackwardWorkspace ws;
                    kernels::cpu::detail::force_scalar_loads(scalar == 1);
                    kernels::embedding_bag_backward_fused(
                        grad, table_offsets, feature_table, ids_t, offsets_t, nullptr,
                        PoolingMode::kSum, optim, got[scalar], s1.defined() ? &s1 : nullptr,
                        s2.defined() ? &s2 : nullptr, ws, Stream::cpu());
                }
                kernels::cpu::detail::force_scalar_loads(false);
                INFO(dtype_name(dtype) << " rule " << static_cast<int>(type) << " decay " << decay);
                CHECK(std::memcmp(got[0].data_ptr(), got[1].data_ptr(), got[0].nbytes()) == 0);
                CHECK(std::memcmp(got[0].data_ptr(), w0.data_ptr(), w0.nbytes()) != 0);
            }
        }
    }
}

TEST_CASE("embedding_bag kernels: the vector lookup gives the scalar lookup's bits",
          "[modules][ops]") {
    // D = 83: a 64-column block, a 16-column block and a 3-column tail; weighted and not.
    constexpr int64_t kRows = 50, kDim = 83, kBatch = 9;
    rng::Rng rng(7);
    std::vector<int64_t> ids, offsets{0};
    std::vector<float> psw;
    for (int64_t bag = 0; bag < 2 * kBatch; ++bag) {
        for (int64_t i = 0; i < bag % 7; ++i) {
            ids.push_back(static_cast<int64_t>(rng.next_u64() % kRows));
            psw.push_back(static_cast<float>(rng.next_u64() % 1000) / 333.f - 1.f);
        }
        offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    const Tensor table_offsets = Tensor::from_vector<int64_t>({0, kRows});
    const Tensor feature_table = Tensor::from_vector<int32_t>({0, 0});
    const Tensor ids_t = Tensor::from_vector(ids), offsets_t = Tensor::from_vector(offsets);
    const Tensor psw_t = Tensor::from_vector(psw);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        Tensor w = Tensor::empty({kRows, kDim}, dtype);
        auto* bytes = static_cast<uint8_t*>(w.data_ptr());
        for (size_t i = 0; i < w.nbytes(); ++i) {  // every bit pattern, NaN and Inf included
            bytes[i] = static_cast<uint8_t>(rng.next_u64());
        }
        for (const Tensor* weights : {static_cast<const Tensor*>(nullptr), &psw_t}) {
            Tensor got[2] = {Tensor::empty({kBatch, 2 * kDim}, DType::kF32),
                             Tensor::empty({kBatch, 2 * kDim}, DType::kF32)};
            for (int scalar = 0; scalar < 2; ++scalar) {
                kernels::cpu::detail::force_scalar_loads(scalar == 1);
                kernels::cpu::embedding_bag_forward(w, table_offsets, feature_table, ids_t,
                                                    offsets_t, weights, PoolingMode::kMean,
                                                    got[scalar]);
            }
            kernels::cpu::detail::force_scalar_loads(false);
            INFO(dtype_name(dtype) << (weights ? " weighted" : ""));
            // The same bits, but for which of two NaNs a sum keeps: x86 keeps its first operand's
            // payload, and the order of a commutative add is the compiler's choice.
            int64_t mismatches = 0;
            for (int64_t i = 0; i < got[0].numel(); ++i) {
                const float x = got[0].data<float>()[i], y = got[1].data<float>()[i];
                const bool same = std::memcmp(&x, &y, 4) == 0 || (std::isnan(x) && std::isnan(y));
                mismatches += same ? 0 : 1;
            }
            CHECK(mismatches == 0);
        }
    }
}
