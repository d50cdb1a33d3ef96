// JaggedTensor: TorchRec's tutorial example, offsets/lengths round trips, weights and validation.
#include <catch2/catch.hpp>

#include "engine/sparse/jagged_tensor.h"

using namespace shardrec;

namespace {

std::vector<int64_t> ivec(const Tensor& t) {
    return t.to_vector<int64_t>();
}

}  // namespace

TEST_CASE("JaggedTensor: tutorial example has offsets [0,1,3] and bags [[5],[7,1]]", "[sparse]") {
    // seed_inventory 1: lengths [1,2], values [5,7,1].
    const JaggedTensor jt = JaggedTensor::from_lengths(Tensor::from_vector<int64_t>({5, 7, 1}),
                                                       Tensor::from_vector<int64_t>({1, 2}));
    CHECK(ivec(jt.offsets()) == std::vector<int64_t>{0, 1, 3});
    CHECK(jt.to_dense() == std::vector<std::vector<int64_t>>{{5}, {7, 1}});
    CHECK(jt.num_samples() == 2);
    CHECK(jt.num_values() == 3);
    CHECK_FALSE(jt.has_weights());
    CHECK_FALSE(jt.weights_or_none().has_value());
    CHECK_THROWS_AS(jt.weights(), Error);
    CHECK(jt.str() == "JaggedTensor([[5], [7, 1]])");
}

TEST_CASE("JaggedTensor: from_offsets derives the same lengths, including empty bags", "[sparse]") {
    const JaggedTensor jt = JaggedTensor::from_offsets(
        Tensor::from_vector<int64_t>({4, 5, 6}), Tensor::from_vector<int64_t>({0, 0, 2, 2, 3}));
    CHECK(ivec(jt.lengths()) == std::vector<int64_t>{0, 2, 0, 1});
    CHECK(jt.to_dense() == std::vector<std::vector<int64_t>>{{}, {4, 5}, {}, {6}});
    const JaggedTensor back = JaggedTensor::from_lengths(jt.values(), jt.lengths());
    CHECK(ivec(back.offsets()) == ivec(jt.offsets()));
}

TEST_CASE("JaggedTensor: weights follow their values bag by bag", "[sparse]") {
    const std::vector<std::vector<int64_t>> ids = {{3, 1}, {}, {2}};
    const std::vector<std::vector<float>> w = {{0.5f, 0.25f}, {}, {1.0f}};
    const JaggedTensor jt = JaggedTensor::from_dense(ids, &w);
    REQUIRE(jt.has_weights());
    CHECK(jt.to_dense() == ids);
    CHECK(jt.to_dense_weights() == w);
    CHECK(jt.weights().to_vector<float>() == std::vector<float>{0.5f, 0.25f, 1.0f});
    const JaggedTensor copy = jt.to(Device::cpu());
    CHECK(copy.to_dense_weights() == w);
    CHECK(JaggedTensor().to(Device::cpu()).num_samples() == 0);
}

TEST_CASE("JaggedTensor: validation names the offending sample", "[sparse]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(JaggedTensor::from_lengths(Tensor::from_vector<int64_t>({1, 2}),
                                                 Tensor::from_vector<int64_t>({3, -1})),
                      Contains("sample 1 has negative length -1"));
    CHECK_THROWS_WITH(JaggedTensor::from_lengths(Tensor::from_vector<int64_t>({1, 2, 3}),
                                                 Tensor::from_vector<int64_t>({1, 1})),
                      Contains("sum(lengths) = 2 but values has 3 rows"));
    CHECK_THROWS_WITH(JaggedTensor::from_lengths(Tensor::from_vector<int64_t>({1, 2}),
                                                 Tensor::from_vector<int64_t>({1, 1}),
                                                 Tensor::from_vector<float>({1.0f})),
                      Contains("weights must be f32 [2]"));
    CHECK_THROWS_WITH(JaggedTensor::from_offsets(Tensor::from_vector<int64_t>({1, 2}),
                                                 Tensor::from_vector<int64_t>({1, 2})),
                      Contains("offsets[0] must be 0"));
    CHECK_THROWS_WITH(JaggedTensor::from_lengths(Tensor::from_vector<int64_t>({1}),
                                                 Tensor::from_vector<int32_t>({1})),
                      Contains("lengths must be i64"));
}

TEST_CASE("JaggedTensor: float [N, D] values (EmbeddingCollection output) are accepted",
          "[sparse]") {
    const Tensor values = Tensor::zeros({5, 3}, DType::kF32);
    const JaggedTensor jt =
        JaggedTensor::from_lengths(values, Tensor::from_vector<int64_t>({1, 1, 3}));
    CHECK(jt.num_values() == 5);
    CHECK(ivec(jt.offsets()) == std::vector<int64_t>{0, 1, 2, 5});
    CHECK_THROWS_AS(jt.to_dense(), Error);  // needs 1-D i64 values
}
