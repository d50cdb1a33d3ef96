// get_recat and permute_sparse_data in one process: TorchRec's recat examples, the 18.1 recat of
// rank 0's received data, variable batch per rank, weights and embedding rows carried.
#include <catch2/catch.hpp>

#include "engine/distributed/permute_sparse_data.h"

using namespace shardrec;
using I64s = std::vector<int64_t>;

namespace {

Tensor i64(const I64s& v) {
    return Tensor::from_vector(v);
}

struct Permuted {
    I64s lengths;
    I64s values;
};

Permuted permute_ids(const I64s& permute,
                     const I64s& sizes,
                     const I64s& lengths,
                     const I64s& values) {
    Tensor out_lengths = Tensor::empty({static_cast<int64_t>(lengths.size())}, DType::kI64);
    Tensor out_values = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI64);
    permute_sparse_data(permute, sizes, i64(lengths), i64(values), nullptr, out_lengths, out_values,
                        nullptr);
    return {out_lengths.to_vector<int64_t>(), out_values.to_vector<int64_t>()};
}

}  // namespace

TEST_CASE("get_recat: TorchRec examples", "[distributed]") {
    CHECK(get_recat(2, 4, 1) == I64s{0, 2, 4, 6, 1, 3, 5, 7});
    CHECK(get_recat(2, 4, 2) == I64s{0, 4, 2, 6, 1, 5, 3, 7});
    CHECK(get_recat(2, 2, 1) == I64s{0, 2, 1, 3});  // 18.1, rank 0
    CHECK(get_recat(1, 3, 1) == I64s{0, 1, 2});
    CHECK(get_recat(0, 4, 1).empty());
    CHECK(recat_rank_order(4, 1) == I64s{0, 1, 2, 3});
    CHECK(recat_rank_order(4, 2) == I64s{0, 2, 1, 3});
    CHECK(recat_rank_order(6, 3) == I64s{0, 2, 4, 1, 3, 5});
    CHECK_THROWS_WITH(get_recat(2, 4, 3), Catch::Contains("must divide"));
}

TEST_CASE("permute_sparse_data: 18.1 rank 0 received data becomes [feature][rank][b]",
          "[distributed]") {
    // Received rank-major: from rank 0 A:[A0] None [A1,A2] | B: None [B0] [B1], from rank 1
    // A:[A3] [A4] None | B: None [B2] [B3,B4]. An = 100+n, Bn = 200+n.
    const Permuted p =
        permute_ids(get_recat(2, 2), {3, 3, 3, 3}, {1, 0, 2, 0, 1, 1, 1, 1, 0, 0, 1, 2},
                    {100, 101, 102, 200, 201, 103, 104, 202, 203, 204});
    CHECK(p.lengths == I64s{1, 0, 2, 1, 1, 0, 0, 1, 1, 0, 1, 2});
    CHECK(p.values == I64s{100, 101, 102, 103, 104, 200, 201, 202, 203, 204});
}

TEST_CASE("permute_sparse_data: variable batch per rank and empty segments", "[distributed]") {
    // Two ranks with batches 1 and 3, two local features: received [rank][feature][b].
    // rank 0: f0 [10], f1 [] ; rank 1: f0 [11] [] [12,13], f1 [14] [15] [16].
    const Permuted p = permute_ids(get_recat(2, 2), {1, 1, 3, 3}, {1, 0, 1, 0, 2, 1, 1, 1},
                                   {10, 11, 12, 13, 14, 15, 16});
    CHECK(p.lengths == I64s{1, 1, 0, 2, 0, 1, 1, 1});
    CHECK(p.values == I64s{10, 11, 12, 13, 14, 15, 16});
    // All bags empty.
    const Permuted e = permute_ids({1, 0}, {2, 1}, {0, 0, 0}, {});
    CHECK(e.lengths == I64s{0, 0, 0});
    CHECK(e.values.empty());
}

TEST_CASE("permute_sparse_data: weights and embedding rows follow their ids", "[distributed]") {
    // Segments: [bag 0: 2 ids] [bag 1: 1 id] [bag 2: 0 ids, bag 3: 1 id]; permute [2, 0, 1].
    const Tensor lengths = i64({2, 1, 0, 1});
    const Tensor rows = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
    const Tensor weights = Tensor::from_vector<float>({0.5f, 1.5f, 2.5f, 3.5f});
    Tensor out_lengths = Tensor::empty({4}, DType::kI64);
    Tensor out_rows = Tensor::empty({4, 2}, DType::kF32);
    Tensor out_weights = Tensor::empty({4}, DType::kF32);
    permute_sparse_data({2, 0, 1}, {1, 1, 2}, lengths, rows, &weights, out_lengths, out_rows,
                        &out_weights);
    CHECK(out_lengths.to_vector<int64_t>() == I64s{0, 1, 2, 1});
    CHECK(out_rows.to_vector<float>() == std::vector<float>{6, 7, 0, 1, 2, 3, 4, 5});
    CHECK(out_weights.to_vector<float>() == std::vector<float>{3.5f, 0.5f, 1.5f, 2.5f});
}

TEST_CASE("permute_sparse_data: rejects a non-permutation and inconsistent sizes",
          "[distributed]") {
    Tensor out_lengths = Tensor::empty({2}, DType::kI64);
    Tensor out_values = Tensor::empty({3}, DType::kI64);
    CHECK_THROWS_WITH(permute_sparse_data({0, 0}, {1, 1}, i64({1, 2}), i64({1, 2, 3}), nullptr,
                                          out_lengths, out_values, nullptr),
                      Catch::Contains("not a permutation"));
    CHECK_THROWS_WITH(permute_sparse_data({1, 0}, {1, 1}, i64({1, 1}), i64({1, 2, 3}), nullptr,
                                          out_lengths, out_values, nullptr),
                      Catch::Contains("lengths sum to 2"));
    CHECK_THROWS_WITH(permute_sparse_data({1, 0}, {1, 2}, i64({1, 2}), i64({1, 2, 3}), nullptr,
                                          out_lengths, out_values, nullptr),
                      Catch::Contains("for 3 bags"));
}
