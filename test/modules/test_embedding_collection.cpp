// EmbeddingCollection: TorchRec's worked example (seed_inventory 18.5), the one-dim rule, the
// fused update of touched rows with duplicates aggregated, and row-wise Adagrad against the
// float64 reference.
#include <catch2/catch.hpp>
#include <cstring>

#include "engine/core/rng.h"
#include "engine/modules/embedding_collection.h"
#include "test/reference/sequence_embedding.h"
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
                      std::vector<int64_t> lengths) {
    return KeyedJaggedTensor::from_lengths_sync(std::move(keys), Tensor::from_vector(values),
                                                Tensor::from_vector(lengths));
}

FusedOptimizerParams optimizer(OptimType type, float lr) {
    FusedOptimizerParams o;
    o.type = type;
    o.learning_rate = lr;
    return o;
}

std::vector<EmbeddingConfig> two_tables(int64_t dim_t2 = 3) {
    return {EmbeddingConfig{"t1", 10, 3, {"f1"}, DType::kF32},
            EmbeddingConfig{"t2", 10, dim_t2, {"f2"}, DType::kF32}};
}

}  // namespace

TEST_CASE("EmbeddingCollection: TorchRec example 18.5 gives one row per id", "[modules]") {
    EmbeddingCollection ec(two_tables(), 7, optimizer(OptimType::kSgd, 0.1f));
    CHECK(ec.embedding_dim() == 3);
    // f1: [0,1], [], [2]; f2: [3], [4], [5,6,7]
    const auto out = ec.forward(kjt({"f1", "f2"}, {0, 1, 2, 3, 4, 5, 6, 7}, {2, 0, 1, 1, 1, 3}));
    REQUIRE(out.size() == 2);
    CHECK(out[1].first == "f2");
    const JaggedTensor& f2 = out[1].second;
    REQUIRE(f2.values().shape() == Shape{5, 3});
    CHECK(f2.lengths().to_vector<int64_t>() == std::vector<int64_t>{1, 1, 3});
    const Tensor rows = ec.weight(1);
    for (int64_t i = 0; i < 5; ++i) {
        CHECK(std::memcmp(f2.values().data<float>() + i * 3, rows.data<float>() + (3 + i) * 3,
                          3 * sizeof(float)) == 0);
    }
    CHECK(out[0].second.values().shape() == Shape{3, 3});
}

TEST_CASE("EmbeddingCollection: tables of different dims are an error", "[modules]") {
    CHECK_THROWS_WITH(EmbeddingCollection(two_tables(4), 1, optimizer(OptimType::kSgd, 0.1f)),
                      Catch::Contains("must share embedding_dim"));
}

TEST_CASE("EmbeddingCollection: fused SGD sums duplicate ids and leaves other rows alone",
          "[modules]") {
    EmbeddingCollection ec(two_tables(), 3, optimizer(OptimType::kSgd, 0.5f));
    const Tensor before = ec.weight(0).clone();
    const auto out = ec.forward(kjt({"f2", "f1"}, {1, 4, 4}, {1, 0, 2, 0}));  // f1: [4, 4], []
    Tensor g1 = Tensor::from_vector<float>({1, 2, 3, 10, 20, 30}, {2, 3});
    Tensor g2 = Tensor::from_vector<float>({5, 5, 5}, {1, 3});
    CHECK_THROWS_WITH(ec.backward({{"f1", g1}}), Catch::Contains("1 gradients for 2 features"));
    ec.backward({{"f2", g2}, {"f1", g1}});
    for (int64_t r = 0; r < 10; ++r) {
        for (int64_t d = 0; d < 3; ++d) {
            const float was = before.data<float>()[r * 3 + d];
            const float g = static_cast<float>(d + 1) + static_cast<float>(10 * (d + 1));
            CHECK(ec.weight(0).data<float>()[r * 3 + d] == (r == 4 ? was - 0.5f * g : was));
        }
    }
    CHECK(ec.fused_optimizer().step == 2);
}

TEST_CASE("EmbeddingCollection: fused row-wise Adagrad matches the float64 reference",
          "[modules]") {
    std::vector<EmbeddingConfig> tables{EmbeddingConfig{"a", 30, 5, {"x", "y"}, DType::kF32},
                                        EmbeddingConfig{"b", 20, 5, {"z"}, DType::kF32}};
    FusedOptimizerParams o = optimizer(OptimType::kExactRowWiseAdagrad, 0.1f);
    EmbeddingCollection ec(tables, 5, o);
    rng::Rng r(test::test_seed(), 8);
    const int64_t batch = 12;
    std::vector<int64_t> values, lengths;
    for (int64_t f = 0; f < 3; ++f) {
        for (int64_t b = 0; b < batch; ++b) {
            lengths.push_back(r.randint(0, 4));
            for (int64_t i = 0; i < lengths.back(); ++i) {
                values.push_back(i == 0 ? 3 : r.randint(0, 20));
            }
        }
    }
    const KeyedJaggedTensor features = kjt({"x", "y", "z"}, values, lengths);
    std::vector<double> w0 = doubles(ec.weight(0)), w1 = doubles(ec.weight(1));
    const auto out = ec.forward(features);
    std::vector<std::pair<std::string, Tensor>> grads;
    for (const auto& [name, jt] : out) {
        Tensor g = Tensor::empty(jt.values().shape(), DType::kF32);
        for (int64_t i = 0; i < g.numel(); ++i) {
            g.data<float>()[i] = r.uniform(-1.f, 1.f);
        }
        grads.emplace_back(name, g);
    }
    ec.backward(grads);
    // Reference over the whole group: table offsets [0, 30, 50], features x, y -> 0, z -> 1.
    ref::EmbeddingLookup a;
    a.dim = 5;
    a.table_offsets = {0, 30, 50};
    a.feature_table = {0, 0, 1};
    a.ids = values;
    a.offsets = {0};
    for (int64_t l : lengths) {
        a.offsets.push_back(a.offsets.back() + l);
    }
    std::vector<double> g;
    for (const auto& kv : grads) {
        const std::vector<double> part = doubles(kv.second);
        g.insert(g.end(), part.begin(), part.end());
    }
    std::vector<double> w = w0;
    w.insert(w.end(), w1.begin(), w1.end());
    const ref::RowGradients rg = ref::sequence_embedding_row_gradients(a, g);
    const ref::OptimizerUpdate u =
        ref::fused_optimizer_update(rg, o, 5, w, std::vector<double>(50, 0.0), {});
    test::Tolerance tol;
    tol.terms = rg.max_count + 8 + 5;
    Tensor got = Tensor::empty({50, 5}, DType::kF32);
    got.slice(0, 30).copy_from(ec.weight(0));
    got.slice(30, 50).copy_from(ec.weight(1));
    const auto c = test::compare(got, u.weights.value, u.weights.mag, tol);
    INFO(c.report);
    CHECK(c.ok);
    Tensor state = Tensor::empty({50}, DType::kF32);
    state.slice(0, 30).copy_from(ec.optimizer_state(0)[0]);
    state.slice(30, 50).copy_from(ec.optimizer_state(1)[0]);
    const auto cs = test::compare(state, u.state1.value, u.state1.mag, tol);
    INFO(cs.report);
    CHECK(cs.ok);
}
