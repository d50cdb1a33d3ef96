// bucketize_kjt_before_all2all in one process: the 18.11 vector, ids past the table, empty bags,
// weights and positions carried, a random case against a per-bag reference loop.
#include <algorithm>
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "engine/distributed/bucketize.h"
#include "test/support/compare.h"

using namespace shardrec;
using I64s = std::vector<int64_t>;
using F32s = std::vector<float>;
using Keys = std::vector<std::string>;

namespace {

Tensor i64(const I64s& v) {
    return Tensor::from_vector(v);
}

I64s ivec(const Tensor& t) {
    return t.to_vector<int64_t>();
}

}  // namespace

TEST_CASE("bucketize_kjt_before_all2all: 18.11 vector", "[distributed]") {
    // N=10, W=2 (block 5), one feature, B=2, lengths [2,3], values [3,7,1,9,5].
    const auto kjt = KeyedJaggedTensor::from_lengths_sync({"f"}, i64({3, 7, 1, 9, 5}), i64({2, 3}));
    const BucketizedKJT out = bucketize_kjt_before_all2all(kjt, 2, {5});
    CHECK(out.features.keys == Keys{"f", "f"});
    CHECK(out.features.stride == 2);
    CHECK(ivec(out.features.lengths) == I64s{1, 1, 1, 2});
    CHECK(ivec(out.features.values) == I64s{3, 1, 2, 4, 0});
    CHECK_FALSE(out.features.weights.has_value());
    REQUIRE(out.unbucketize_permute.has_value());
    CHECK(ivec(*out.unbucketize_permute) == I64s{0, 2, 1, 3, 4});

    const BucketizedKJT no_permute = bucketize_kjt_before_all2all(kjt, 2, {5}, false);
    CHECK_FALSE(no_permute.unbucketize_permute.has_value());
    CHECK(ivec(no_permute.features.values) == I64s{3, 1, 2, 4, 0});
}

TEST_CASE("bucketize_kjt_before_all2all: ids past the table go to id % W as id / W",
          "[distributed]") {
    // Block 5, W=2: 12 -> bucket 0 as 6, 13 -> bucket 1 as 6, 4 -> bucket 0 as 4.
    const auto kjt = KeyedJaggedTensor::from_lengths_sync({"f"}, i64({12, 13, 4}), i64({3}));
    const BucketizedKJT out = bucketize_kjt_before_all2all(kjt, 2, {5});
    CHECK(ivec(out.features.lengths) == I64s{2, 1});
    CHECK(ivec(out.features.values) == I64s{6, 4, 6});
    CHECK(ivec(*out.unbucketize_permute) == I64s{0, 2, 1});
}

TEST_CASE("bucketize_kjt_before_all2all: two features, empty bags, weights and positions",
          "[distributed]") {
    // W=3. A (block 3): [0, 8], []. B (block 2): [], [5, 1, 3].
    const auto kjt = KeyedJaggedTensor::from_lengths_sync(
        {"A", "B"}, i64({0, 8, 5, 1, 3}), i64({2, 0, 0, 3}),
        Tensor::from_vector<float>({0.1f, 0.2f, 0.3f, 0.4f, 0.5f}));
    const BucketizedKJT out = bucketize_kjt_before_all2all(kjt, 3, {3, 2});
    CHECK(out.features.keys == Keys{"A", "B", "A", "B", "A", "B"});
    CHECK(ivec(out.features.lengths) == I64s{1, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1});
    CHECK(ivec(out.features.values) == I64s{0, 1, 1, 2, 1});
    REQUIRE(out.features.weights.has_value());
    CHECK(out.features.weights->to_vector<float>() == F32s{0.1f, 0.4f, 0.5f, 0.2f, 0.3f});
    CHECK(ivec(*out.unbucketize_permute) == I64s{0, 3, 4, 1, 2});

    // bucketize_pos: each id's position in its input bag replaces the weights.
    const BucketizedKJT pos = bucketize_kjt_before_all2all(kjt, 3, {3, 2}, true, true);
    CHECK(ivec(pos.features.values) == I64s{0, 1, 1, 2, 1});
    CHECK(pos.features.weights->to_vector<float>() == F32s{0, 1, 2, 1, 0});
}

TEST_CASE("bucketize_kjt_before_all2all: one bucket and all-empty bags", "[distributed]") {
    const auto kjt = KeyedJaggedTensor::from_lengths_sync({"f"}, i64({4, 2}), i64({1, 0, 1}));
    const BucketizedKJT one = bucketize_kjt_before_all2all(kjt, 1, {10});
    CHECK(ivec(one.features.lengths) == I64s{1, 0, 1});
    CHECK(ivec(one.features.values) == I64s{4, 2});
    CHECK(ivec(*one.unbucketize_permute) == I64s{0, 1});

    const auto empty = KeyedJaggedTensor::from_lengths_sync({"f", "g"}, i64({}), i64({0, 0}));
    const BucketizedKJT e = bucketize_kjt_before_all2all(empty, 4, {3, 3});
    CHECK(ivec(e.features.lengths) == I64s(8, 0));
    CHECK(e.features.values.numel() == 0);
    CHECK(e.features.keys.size() == 8);
}

TEST_CASE("bucketize_kjt_before_all2all: random KJT against a per-bag loop", "[distributed]") {
    const uint64_t seed = test::test_seed();
    INFO("seed " << seed);
    rng::Rng gen(seed, 11);
    const int64_t num_keys = 3, batch = 5, buckets = 3;
    const I64s blocks = {1, 4, 7};
    I64s lengths, values;
    for (int64_t f = 0; f < num_keys; ++f) {
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t len = gen.randint(0, 5);
            lengths.push_back(len);
            for (int64_t i = 0; i < len; ++i) {
                values.push_back(gen.randint(0, 2 * blocks[f] * buckets + 3));  // some past E
            }
        }
    }
    const auto kjt =
        KeyedJaggedTensor::from_lengths_sync({"a", "b", "c"}, i64(values), i64(lengths));
    const BucketizedKJT out = bucketize_kjt_before_all2all(kjt, buckets, blocks);

    // Reference: bag (bucket, f, b) holds, in input order, the new ids of bag (f, b) in bucket.
    I64s want_lengths, want_values;
    for (int64_t k = 0; k < buckets; ++k) {
        int64_t at = 0;
        for (int64_t f = 0; f < num_keys; ++f) {
            for (int64_t b = 0; b < batch; ++b) {
                const int64_t len = lengths[f * batch + b];
                int64_t in_bucket = 0;
                for (int64_t i = at; i < at + len; ++i) {
                    const int64_t x = values[i];
                    const bool in_range = x < blocks[f] * buckets;
                    if ((in_range ? x / blocks[f] : x % buckets) == k) {
                        want_values.push_back(in_range ? x % blocks[f] : x / buckets);
                        ++in_bucket;
                    }
                }
                want_lengths.push_back(in_bucket);
                at += len;
            }
        }
    }
    CHECK(ivec(out.features.lengths) == want_lengths);
    CHECK(ivec(out.features.values) == want_values);
    // unbucketize_permute is a permutation that maps every input id to its new id.
    const I64s perm = ivec(*out.unbucketize_permute);
    const I64s got_values = ivec(out.features.values);
    int64_t at = 0;
    for (int64_t f = 0; f < num_keys; ++f) {
        const int64_t in_range_end = blocks[f] * buckets;
        for (int64_t i = at; i < at + kjt.length_per_key()[f]; ++i) {
            const int64_t x = values[i];
            REQUIRE(got_values[perm[i]] == (x < in_range_end ? x % blocks[f] : x / buckets));
        }
        at += kjt.length_per_key()[f];
    }
    I64s sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
        REQUIRE(sorted[i] == static_cast<int64_t>(i));
    }
}

TEST_CASE("bucketize_kjt_before_all2all: rejects bad ids, block sizes and VBE", "[distributed]") {
    const auto kjt = KeyedJaggedTensor::from_lengths_sync({"f"}, i64({1, -2}), i64({2}));
    CHECK_THROWS_WITH(bucketize_kjt_before_all2all(kjt, 2, {5}), Catch::Contains("id -2 < 0"));
    const auto ok = KeyedJaggedTensor::from_lengths_sync({"f"}, i64({1}), i64({1}));
    CHECK_THROWS_WITH(bucketize_kjt_before_all2all(ok, 2, {0}), Catch::Contains("block size 0"));
    CHECK_THROWS_WITH(bucketize_kjt_before_all2all(ok, 2, {1, 1}),
                      Catch::Contains("2 block sizes for 1 keys"));
    const auto vbe = KeyedJaggedTensor::from_lengths_variable_stride({"f", "g"}, i64({1, 2}),
                                                                     i64({1, 0, 1}), {1, 2});
    CHECK_THROWS_WITH(bucketize_kjt_before_all2all(vbe, 2, {5, 5}), Catch::Contains("VBE"));
}
