// KeyedTensor: the EBC output layout of seed_inventory 18.5 (f1 dim 3, f2 dim 4 -> [3, 7],
// offset_per_key [0, 3, 7]), to_dict copies, regroup and concat.
#include <catch2/catch.hpp>

#include "engine/sparse/keyed_tensor.h"

using namespace shardrec;

namespace {

// [B, C] with element (b, c) = 10*b + c, so every copied column is identifiable.
Tensor iota2d(int64_t rows, int64_t cols, float base = 0) {
    std::vector<float> v;
    for (int64_t b = 0; b < rows; ++b) {
        for (int64_t c = 0; c < cols; ++c) {
            v.push_back(base + 10.0f * b + c);
        }
    }
    return Tensor::from_vector(v, {rows, cols});
}

}  // namespace

TEST_CASE("KeyedTensor: EBC output [3, 7] has offset_per_key [0, 3, 7]", "[sparse]") {
    const KeyedTensor kt({"f1", "f2"}, {3, 4}, iota2d(3, 7));
    CHECK(kt.keys() == std::vector<std::string>{"f1", "f2"});
    CHECK(kt.length_per_key() == std::vector<int64_t>{3, 4});
    CHECK(kt.offset_per_key() == std::vector<int64_t>{0, 3, 7});
    CHECK(kt.key_dim() == 1);
    CHECK(kt.batch_size() == 3);
    const auto dict = kt.to_dict();
    REQUIRE(dict.size() == 2);
    CHECK(dict[0].second.shape() == Shape{3, 3});
    CHECK(dict[1].second.shape() == Shape{3, 4});
    CHECK(dict[1].second.to_vector<float>() ==
          std::vector<float>{3, 4, 5, 6, 13, 14, 15, 16, 23, 24, 25, 26});
    CHECK(dict[0].second.to_vector<float>() == std::vector<float>{0, 1, 2, 10, 11, 12, 20, 21, 22});
    // to_dict returns copies: writing one leaves the KT unchanged.
    Tensor f1 = kt["f1"];
    f1.data<float>()[0] = -1;
    CHECK(kt.values().data<float>()[0] == 0.0f);
}

TEST_CASE("KeyedTensor: from_tensor_list, concat and regroup move whole key columns", "[sparse]") {
    const KeyedTensor a =
        KeyedTensor::from_tensor_list({"x", "y"}, {iota2d(2, 2), iota2d(2, 1, 100)});
    CHECK(a.values().to_vector<float>() == std::vector<float>{0, 1, 100, 10, 11, 110});
    const KeyedTensor b({"z"}, {2}, iota2d(2, 2, 200));
    const KeyedTensor ab = KeyedTensor::concat({a, b});
    CHECK(ab.keys() == std::vector<std::string>{"x", "y", "z"});
    CHECK(ab.offset_per_key() == std::vector<int64_t>{0, 2, 3, 5});
    CHECK(ab["z"].to_vector<float>() == std::vector<float>{200, 201, 210, 211});
    const auto groups = KeyedTensor::regroup({a, b}, {{"z", "x"}, {"y"}});
    REQUIRE(groups.size() == 2);
    CHECK(groups[0].shape() == Shape{2, 4});
    CHECK(groups[0].to_vector<float>() == std::vector<float>{200, 201, 0, 1, 210, 211, 10, 11});
    CHECK(groups[1].to_vector<float>() == std::vector<float>{100, 110});
}

TEST_CASE("KeyedTensor: inconsistent inputs are rejected", "[sparse]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(KeyedTensor({"a", "b"}, {3, 3}, iota2d(2, 7)),
                      Contains("has 7 columns but sum(length_per_key) = 6"));
    CHECK_THROWS_WITH(KeyedTensor({"a", "a"}, {3, 4}, iota2d(2, 7)),
                      Contains("key 'a' appears twice"));
    CHECK_THROWS_WITH(KeyedTensor({"a"}, {7}, iota2d(2, 7), 0), Contains("only key_dim = 1"));
    const KeyedTensor kt({"a"}, {2}, iota2d(2, 2));
    CHECK_THROWS_WITH(KeyedTensor::regroup({kt}, {{"b"}}), Contains("no input has key 'b'"));
    CHECK_THROWS_WITH(KeyedTensor::concat({kt, KeyedTensor({"b"}, {2}, iota2d(3, 2))}),
                      Contains("inputs disagree"));
}
