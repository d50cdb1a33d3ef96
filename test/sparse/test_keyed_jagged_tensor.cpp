// KeyedJaggedTensor: the worked examples of seed_inventory 18.1, 18.5, 18.6 and 18.7, the
// key-major layout under permute/split/concat, variable batch per key, and validation messages.
#include <catch2/catch.hpp>
#include <optional>

#include "engine/core/allocator.h"
#include "engine/sparse/batch.h"
#include "engine/sparse/keyed_jagged_tensor.h"

using namespace shardrec;
using Bags = std::vector<std::vector<int64_t>>;

namespace {

std::vector<int64_t> ivec(const Tensor& t) {
    return t.to_vector<int64_t>();
}

Tensor i64(std::vector<int64_t> v) {
    return Tensor::from_vector(v);
}

// 18.1 rank 0 input: A:[A0] None [A1,A2] | B: None [B0] [B1] | C: [C0] [C1] None, with An = 100+n,
// Bn = 200+n, Cn = 300+n.
KeyedJaggedTensor rank0_input() {
    return KeyedJaggedTensor::from_lengths_sync({"A", "B", "C"},
                                                i64({100, 101, 102, 200, 201, 300, 301}),
                                                i64({1, 0, 2, 0, 1, 1, 1, 1, 0}));
}

}  // namespace

TEST_CASE("KeyedJaggedTensor: tutorial from_jt_dict gives lengths [3,1,2,2]", "[sparse]") {
    // 18.7: product_jt(values [1,2,1,5], lengths [3,1]), user_jt([2,3,4,1], [2,2]).
    const JaggedTensor product = JaggedTensor::from_lengths(i64({1, 2, 1, 5}), i64({3, 1}));
    const JaggedTensor user = JaggedTensor::from_lengths(i64({2, 3, 4, 1}), i64({2, 2}));
    const KeyedJaggedTensor kjt =
        KeyedJaggedTensor::from_jt_dict({{"product", product}, {"user", user}});
    CHECK(kjt.keys() == std::vector<std::string>{"product", "user"});
    CHECK(ivec(kjt.lengths()) == std::vector<int64_t>{3, 1, 2, 2});
    CHECK(ivec(kjt.values()) == std::vector<int64_t>{1, 2, 1, 5, 2, 3, 4, 1});
    CHECK(ivec(kjt.offsets()) == std::vector<int64_t>{0, 3, 4, 6, 8});
    CHECK(kjt.stride() == 2);
    CHECK_FALSE(kjt.variable_stride_per_key());
    CHECK(kjt.length_per_key() == std::vector<int64_t>{4, 4});
    CHECK(kjt.offset_per_key() == std::vector<int64_t>{0, 4, 8});
    CHECK(kjt.str() ==
          R"(KeyedJaggedTensor({"product": [[1, 2, 1], [5]], "user": [[2, 3], [4, 1]]}))");
    const auto dict = kjt.to_dict();
    REQUIRE(dict.size() == 2);
    CHECK(dict[0].first == "product");
    CHECK(dict[0].second.to_dense() == Bags{{1, 2, 1}, {5}});
    CHECK(dict[1].second.to_dense() == Bags{{2, 3}, {4, 1}});
    CHECK(ivec(dict[1].second.offsets()) == std::vector<int64_t>{0, 2, 4});
}

TEST_CASE("KeyedJaggedTensor: EBC example offsets [0,2,2,3,4,5,8] split into f1 and f2",
          "[sparse]") {
    // 18.5: f1: [0,1], None, [2] and f2: [3], [4], [5,6,7].
    const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_offsets_sync(
        {"f1", "f2"}, i64({0, 1, 2, 3, 4, 5, 6, 7}), i64({0, 2, 2, 3, 4, 5, 8}));
    CHECK(kjt.stride() == 3);
    CHECK(ivec(kjt.lengths()) == std::vector<int64_t>{2, 0, 1, 1, 1, 3});
    CHECK(kjt.length_per_key() == std::vector<int64_t>{3, 5});
    CHECK(kjt.offset_per_key() == std::vector<int64_t>{0, 3, 8});
    CHECK(kjt.lengths_offset_per_key() == std::vector<int64_t>{0, 3, 6});
    CHECK(kjt["f1"].to_dense() == Bags{{0, 1}, {}, {2}});
    CHECK(kjt["f2"].to_dense() == Bags{{3}, {4}, {5, 6, 7}});
    CHECK(kjt.key_index("f2") == 1);
    CHECK_THROWS_WITH(kjt["f3"], Catch::Contains("no key 'f3'"));
}

TEST_CASE("KeyedJaggedTensor: weighted to_dict keeps weights with their ids", "[sparse]") {
    // 18.6 layout: F0 [[0,1],[],[2]], F1 [[3],[4],[5,6,7]], F2 [[3,4],[5,6,7],[]]. The weights
    // are distinct (w_i = i / 16) so that a misaligned slice is caught.
    std::vector<float> w;
    for (int i = 0; i < 13; ++i) {
        w.push_back(static_cast<float>(i) / 16.0f);
    }
    const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_sync(
        {"F0", "F1", "F2"}, i64({0, 1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7}),
        i64({2, 0, 1, 1, 1, 3, 2, 3, 0}), Tensor::from_vector(w));
    REQUIRE(kjt.has_weights());
    const auto dict = kjt.to_dict();
    CHECK(dict[0].second.to_dense() == Bags{{0, 1}, {}, {2}});
    CHECK(dict[1].second.to_dense() == Bags{{3}, {4}, {5, 6, 7}});
    CHECK(dict[2].second.to_dense() == Bags{{3, 4}, {5, 6, 7}, {}});
    using W = std::vector<std::vector<float>>;
    CHECK(dict[2].second.to_dense_weights() ==
          W{{8 / 16.f, 9 / 16.f}, {10 / 16.f, 11 / 16.f, 12 / 16.f}, {}});
    CHECK(dict[1].second.to_dense_weights() ==
          W{{3 / 16.f}, {4 / 16.f}, {5 / 16.f, 6 / 16.f, 7 / 16.f}});
}

TEST_CASE("KeyedJaggedTensor: split [2,1] of the all-to-all input keeps key-major layout",
          "[sparse]") {
    // 18.1 with splits=[2,1]: rank 0 keeps A, B; rank 1 gets C.
    const auto parts = rank0_input().split({2, 1});
    REQUIRE(parts.size() == 2);
    CHECK(parts[0].keys() == std::vector<std::string>{"A", "B"});
    CHECK(ivec(parts[0].lengths()) == std::vector<int64_t>{1, 0, 2, 0, 1, 1});
    CHECK(ivec(parts[0].values()) == std::vector<int64_t>{100, 101, 102, 200, 201});
    CHECK(parts[1].keys() == std::vector<std::string>{"C"});
    CHECK(ivec(parts[1].lengths()) == std::vector<int64_t>{1, 1, 0});
    CHECK(ivec(parts[1].values()) == std::vector<int64_t>{300, 301});
    CHECK(parts[1].stride() == 3);
    const KeyedJaggedTensor joined = KeyedJaggedTensor::concat(parts);
    CHECK(joined.str() == rank0_input().str());
    CHECK(ivec(joined.offsets()) == ivec(rank0_input().offsets()));
    const auto empty_first = rank0_input().split({0, 3});
    CHECK(empty_first[0].num_keys() == 0);
    CHECK(empty_first[0].stride() == 3);
    CHECK(empty_first[1].str() == rank0_input().str());
}

TEST_CASE("KeyedJaggedTensor: permute reorders whole key blocks, repeats allowed", "[sparse]") {
    std::vector<float> w = {1, 2, 3, 4, 5, 6, 7};
    const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_sync(
        {"A", "B", "C"}, rank0_input().values(), rank0_input().lengths(), Tensor::from_vector(w));
    const KeyedJaggedTensor p = kjt.permute({2, 0});
    CHECK(p.keys() == std::vector<std::string>{"C", "A"});
    CHECK(ivec(p.lengths()) == std::vector<int64_t>{1, 1, 0, 1, 0, 2});
    CHECK(ivec(p.values()) == std::vector<int64_t>{300, 301, 100, 101, 102});
    CHECK(p.weights().to_vector<float>() == std::vector<float>{6, 7, 1, 2, 3});
    CHECK(p.offset_per_key() == std::vector<int64_t>{0, 2, 5});
    // A repeated key is legal for permute's own layout; the KJT then rejects duplicate keys.
    CHECK_THROWS_WITH(kjt.permute({1, 1}), Catch::Contains("key 'B' appears twice"));
    CHECK_THROWS_WITH(kjt.permute({3}), Catch::Contains("index 3 out of [0, 3)"));
}

TEST_CASE("KJTBufferPool: permute into pooled buffers, a set reused once its KJT is gone",
          "[sparse]") {
    std::vector<float> w = {1, 2, 3, 4, 5, 6, 7};
    const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_sync(
        {"A", "B", "C"}, rank0_input().values(), rank0_input().lengths(), Tensor::from_vector(w));
    KJTBufferPool pool;
    KJTBuffers& first = pool.acquire();
    std::optional<KeyedJaggedTensor> p = kjt.permute({2, 0}, &first);
    const KeyedJaggedTensor fresh = kjt.permute({2, 0});
    CHECK(p->str() == fresh.str());
    CHECK(ivec(p->offsets()) == ivec(fresh.offsets()));
    CHECK(p->values().data_ptr() == first.values.data_ptr());
    CHECK(first.in_use());
    // While p lives its set is not handed out again.
    KJTBuffers& second = pool.acquire();
    CHECK(&second != &first);
    const void* values_at = first.values.data_ptr();
    p.reset();
    CHECK(!first.in_use());
    KJTBuffers& again = pool.acquire();
    CHECK(&again == &first);
    // A smaller permute fits the grown buffers: no new storage.
    const KeyedJaggedTensor q = kjt.permute({1}, &again);
    CHECK(q.values().data_ptr() == values_at);
    CHECK(q.str() == kjt.permute({1}).str());
}

TEST_CASE("KeyedJaggedTensor: variable batch per key", "[sparse]") {
    // Key A has 2 samples, key B has 3: lengths [A0 A1 | B0 B1 B2].
    const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_variable_stride(
        {"A", "B"}, i64({1, 2, 3, 4, 5}), i64({2, 0, 1, 0, 2}), {2, 3});
    CHECK(kjt.variable_stride_per_key());
    CHECK(kjt.stride() == 3);
    CHECK(kjt.stride_per_key() == std::vector<int64_t>{2, 3});
    CHECK(kjt.lengths_offset_per_key() == std::vector<int64_t>{0, 2, 5});
    CHECK(kjt["A"].to_dense() == Bags{{1, 2}, {}});
    CHECK(kjt["B"].to_dense() == Bags{{3}, {}, {4, 5}});
    const KeyedJaggedTensor p = kjt.permute({1, 0});
    CHECK(p.stride_per_key() == std::vector<int64_t>{3, 2});
    CHECK(ivec(p.lengths()) == std::vector<int64_t>{1, 0, 2, 2, 0});
    CHECK(p["A"].to_dense() == Bags{{1, 2}, {}});
    // Concatenating fixed-stride KJTs of different batch sizes gives a variable stride.
    const KeyedJaggedTensor a = KeyedJaggedTensor::from_lengths_sync({"A"}, i64({7}), i64({1, 0}));
    const KeyedJaggedTensor b = KeyedJaggedTensor::from_lengths_sync({"B"}, i64({}), i64({0}));
    const KeyedJaggedTensor ab = KeyedJaggedTensor::concat({a, b});
    CHECK(ab.variable_stride_per_key());
    CHECK(ab.stride_per_key() == std::vector<int64_t>{2, 1});
    CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_variable_stride({"A", "B"}, i64({1}),
                                                                      i64({1, 0, 0}), {2, 2}),
                      Catch::Contains("3 lengths and 4 offsets for sum(stride_per_key) = 4"));
}

TEST_CASE("KeyedJaggedTensor: validation names the key and the sample", "[sparse]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"product", "user"}, i64({1, 2, 3}),
                                                           i64({1, 1, 2, -1})),
                      Contains("key 'user' sample 1 has negative length -1"));
    CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"product", "user"}, i64({1, 2, 3}),
                                                           i64({1, 1, 0, 0})),
                      Contains("sum(lengths) = 2 but values has 3 entries"));
    CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"a", "b"}, i64({1}), i64({1, 0, 0})),
                      Contains("3 lengths do not split evenly over 2 keys"));
    CHECK_THROWS_WITH(
        KeyedJaggedTensor::from_lengths_sync({"a", "b"}, i64({1}), i64({1, 0}), std::nullopt, 2),
        Contains("want F*B = 2*2 = 4"));
    CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"a"}, i64({1, 2}), i64({2}),
                                                           Tensor::from_vector<float>({1})),
                      Contains("weights must be f32 [2]"));
    CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"a", "a"}, i64({}), i64({0, 0})),
                      Contains("key 'a' appears twice"));
    CHECK_THROWS_WITH(KeyedJaggedTensor::from_offsets_sync({"a"}, i64({1, 2}), i64({0, 2, 1})),
                      Contains("key 'a' sample 1 has negative length -1"));
    const KeyedJaggedTensor unweighted = rank0_input();
    CHECK_THROWS_AS(unweighted.weights(), Error);
    const KeyedJaggedTensor weighted = KeyedJaggedTensor::from_lengths_sync(
        {"D"}, i64({1}), i64({1, 0, 0}), Tensor::from_vector<float>({0.5f}));
    CHECK_THROWS_WITH(KeyedJaggedTensor::concat({unweighted, weighted}),
                      Contains("input 1 is weighted but input 0 is unweighted"));
}

TEST_CASE("KeyedJaggedTensor: empty KJT, zero-length batch and to(cpu)", "[sparse]") {
    const KeyedJaggedTensor empty;
    CHECK(empty.num_keys() == 0);
    CHECK(empty.stride() == 0);
    CHECK(ivec(empty.offsets()) == std::vector<int64_t>{0});
    CHECK(empty.str() == "KeyedJaggedTensor({})");
    const KeyedJaggedTensor no_samples =
        KeyedJaggedTensor::from_lengths_sync({"a", "b"}, i64({}), i64({}), std::nullopt, 0);
    CHECK(no_samples.length_per_key() == std::vector<int64_t>{0, 0});
    CHECK(no_samples["b"].num_samples() == 0);
    const KeyedJaggedTensor moved = rank0_input().to(Device::cpu());
    CHECK(moved.length_per_key() == std::vector<int64_t>{3, 2, 2});
    CHECK(moved.str() == rank0_input().str());
}

TEST_CASE("KJT: an empty one, and a Batch holding one, allocate nothing", "[sparse]") {
    (void)KeyedJaggedTensor();  // the process's empty offsets exist from here on
    const int64_t before = alloc_stats(DeviceType::kCpu).num_allocs;
    const KeyedJaggedTensor empty;
    const Batch batch;
    CHECK(alloc_stats(DeviceType::kCpu).num_allocs == before);
    CHECK(empty.offsets().to_vector<int64_t>() == std::vector<int64_t>{0});
    CHECK(batch.sparse.num_keys() == 0);
    // Builders start from an empty KJT and replace its tensors: the shared offsets stay [0].
    const KeyedJaggedTensor built = KeyedJaggedTensor::from_lengths_sync(
        {"a"}, Tensor::from_vector<int64_t>({7, 8}), Tensor::from_vector<int64_t>({2}));
    CHECK(built.offsets().to_vector<int64_t>() == std::vector<int64_t>{0, 2});
    CHECK(KeyedJaggedTensor().offsets().to_vector<int64_t>() == std::vector<int64_t>{0});
}
