// Shard layouts of every sharding type (TorchRec's exactly), names, placements, and the rules
// sharding_problem enforces.
#include <catch2/catch.hpp>

#include "engine/core/error.h"
#include "engine/distributed/sharding_types.h"

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

PlacementEnv env_of(int world, int local, const std::string& device = "cpu") {
    PlacementEnv env;
    env.world_size = world;
    env.local_size = local;
    env.compute_device = device;
    return env;
}

std::vector<int64_t> rows_of(const ParameterSharding& ps) {
    std::vector<int64_t> rows;
    for (const ShardMetadata& s : ps.sharding_spec) {
        rows.push_back(s.shard_sizes[0]);
    }
    return rows;
}

std::vector<int64_t> row_offsets_of(const ParameterSharding& ps) {
    std::vector<int64_t> offsets;
    for (const ShardMetadata& s : ps.sharding_spec) {
        offsets.push_back(s.shard_offsets[0]);
    }
    return offsets;
}

ParameterSharding make(ShardingType type,
                       int64_t rows,
                       int64_t cols,
                       const std::vector<int>& ranks,
                       const PlacementEnv& env,
                       const std::vector<int64_t>& widths = {}) {
    const auto kernel = type == ShardingType::kDataParallel ? EmbeddingComputeKernel::kDense
                                                            : EmbeddingComputeKernel::kFused;
    return make_parameter_sharding(type, kernel, rows, cols, ranks, widths, env);
}

}  // namespace

TEST_CASE("ShardingType: TorchRec names, informal names, round trip", "[distributed]") {
    CHECK(sharding_type_names() == std::vector<std::string>{"data_parallel", "table_wise",
                                                            "column_wise", "row_wise",
                                                            "table_row_wise"});
    for (const std::string& name : sharding_type_names()) {
        const auto type = parse_sharding_type(name);
        REQUIRE(type);
        CHECK(sharding_type_name(*type) == name);
    }
    CHECK(parse_sharding_type("rw") == ShardingType::kRowWise);
    CHECK(parse_sharding_type("twrw") == ShardingType::kTableRowWise);
    CHECK(parse_sharding_type("dp") == ShardingType::kDataParallel);
    CHECK_FALSE(parse_sharding_type("row-wise"));
    CHECK(parse_compute_kernel("fused") == EmbeddingComputeKernel::kFused);
    CHECK(std::string(compute_kernel_name(EmbeddingComputeKernel::kDense)) == "dense");
    CHECK(parse_compute_kernel("fused_uvm") == EmbeddingComputeKernel::kFusedUvm);
    CHECK(parse_compute_kernel("fused_uvm_caching") == EmbeddingComputeKernel::kFusedUvmCaching);
    CHECK(is_cached_kernel(EmbeddingComputeKernel::kFusedUvmCaching));
    CHECK_FALSE(is_cached_kernel(EmbeddingComputeKernel::kFusedUvm));
    CHECK_FALSE(parse_compute_kernel("uvm_caching"));
}

TEST_CASE("ShardMetadata: placement strings as TorchRec writes them", "[distributed]") {
    const PlacementEnv gpus = env_of(16, 8, "cuda");
    CHECK(gpus.device_of(11) == "cuda:3");
    CHECK(env_of(4, 2).device_of(3) == "cpu");
    const auto parsed = parse_placement("rank:12/cuda:4");
    REQUIRE(parsed);
    CHECK(parsed->rank == 12);
    CHECK(parsed->device == "cuda:4");
    CHECK(parsed->placement() == "rank:12/cuda:4");
    for (const char* bad : {"rank:/cpu", "rank:1", "rank:1/", "r:1/cpu", "rank:-1/cpu"}) {
        INFO(bad);
        CHECK_FALSE(parse_placement(bad));
    }
}

TEST_CASE("Layout: table_wise is one whole shard on its rank", "[distributed]") {
    const ParameterSharding ps =
        make(ShardingType::kTableWise, 4096, 64, {2}, env_of(4, 4, "cuda"));
    REQUIRE(ps.sharding_spec.size() == 1);
    CHECK(ps.ranks == std::vector<int>{2});
    CHECK(ps.sharding_spec[0].shard_offsets == std::array<int64_t, 2>{0, 0});
    CHECK(ps.sharding_spec[0].shard_sizes == std::array<int64_t, 2>{4096, 64});
    CHECK(ps.sharding_spec[0].placement() == "rank:2/cuda:2");
}

TEST_CASE("Layout: row_wise blocks of ceil(E/W), the rest last, E not divisible by W",
          "[distributed]") {
    const ParameterSharding ps = make(ShardingType::kRowWise, 10, 8, all_ranks(4), env_of(4, 4));
    CHECK(rows_of(ps) == std::vector<int64_t>{3, 3, 3, 1});
    CHECK(row_offsets_of(ps) == std::vector<int64_t>{0, 3, 6, 9});
    CHECK(ps.ranks == std::vector<int>{0, 1, 2, 3});
    for (const ShardMetadata& s : ps.sharding_spec) {
        CHECK(s.shard_offsets[1] == 0);
        CHECK(s.shard_sizes[1] == 8);
    }
    CHECK(row_block_size(10, 4) == 3);
}

TEST_CASE("Layout: row_wise keeps empty shards when blocks run out", "[distributed]") {
    // TorchRec's example: 5 rows on 4 ranks give [2, 2, 1, 0].
    const ParameterSharding five = make(ShardingType::kRowWise, 5, 4, all_ranks(4), env_of(4, 2));
    CHECK(rows_of(five) == std::vector<int64_t>{2, 2, 1, 0});
    CHECK(row_offsets_of(five) == std::vector<int64_t>{0, 2, 4, 5});
    // E < W: blocks of one row, the last ranks hold nothing (offset E, size [0, D]).
    const ParameterSharding two = make(ShardingType::kRowWise, 2, 4, all_ranks(4), env_of(4, 2));
    CHECK(rows_of(two) == std::vector<int64_t>{1, 1, 0, 0});
    CHECK(row_offsets_of(two) == std::vector<int64_t>{0, 1, 2, 2});
    CHECK(two.sharding_spec[3].shard_sizes == std::array<int64_t, 2>{0, 4});
    CHECK(two.sharding_spec[3].rank == 3);
}

TEST_CASE("Layout: column_wise even split puts the remainder last; explicit unequal widths",
          "[distributed]") {
    const PlacementEnv env = env_of(4, 4);
    const ParameterSharding even = make(ShardingType::kColumnWise, 100, 10, {1, 2, 3}, env);
    REQUIRE(even.sharding_spec.size() == 3);
    CHECK(even.sharding_spec[0].shard_sizes == std::array<int64_t, 2>{100, 3});
    CHECK(even.sharding_spec[2].shard_sizes == std::array<int64_t, 2>{100, 4});
    CHECK(even.sharding_spec[2].shard_offsets == std::array<int64_t, 2>{0, 6});
    CHECK(even_column_widths(10, 3) == std::vector<int64_t>{3, 3, 4});

    // Unequal widths, two shards on rank 2.
    const ParameterSharding cw =
        make(ShardingType::kColumnWise, 100, 10, {2, 0, 2}, env, {2, 6, 2});
    std::vector<int64_t> offsets, widths;
    for (const ShardMetadata& s : cw.sharding_spec) {
        offsets.push_back(s.shard_offsets[1]);
        widths.push_back(s.shard_sizes[1]);
        CHECK(s.shard_offsets[0] == 0);
        CHECK(s.shard_sizes[0] == 100);
    }
    CHECK(offsets == std::vector<int64_t>{0, 2, 8});
    CHECK(widths == std::vector<int64_t>{2, 6, 2});
    CHECK(cw.shards_on(2).size() == 2);
    CHECK(cw.shards_on(1).empty());
}

TEST_CASE("Layout: table_row_wise splits rows over one node of 2, in a world of 2 nodes",
          "[distributed]") {
    const PlacementEnv env = env_of(4, 2, "cuda");
    const ParameterSharding ps = make(ShardingType::kTableRowWise, 7, 16, node_ranks(1, 2), env);
    CHECK(ps.ranks == std::vector<int>{2, 3});
    CHECK(rows_of(ps) == std::vector<int64_t>{4, 3});
    CHECK(row_offsets_of(ps) == std::vector<int64_t>{0, 4});
    CHECK(ps.sharding_spec[0].placement() == "rank:2/cuda:0");
    CHECK(ps.sharding_spec[1].placement() == "rank:3/cuda:1");
}

TEST_CASE("Layout: data_parallel replicates on every rank with no shard spec", "[distributed]") {
    const ParameterSharding ps =
        make(ShardingType::kDataParallel, 3, 8, all_ranks(3), env_of(3, 3));
    CHECK(ps.ranks == std::vector<int>{0, 1, 2});
    CHECK(ps.sharding_spec.empty());
    CHECK(ps.compute_kernel == EmbeddingComputeKernel::kDense);
}

TEST_CASE("sharding_problem: each type's rules", "[distributed]") {
    const PlacementEnv env = env_of(4, 2);
    const auto problem = [&](ShardingType type, const std::vector<int>& ranks,
                             const std::vector<int64_t>& widths = {},
                             EmbeddingComputeKernel kernel = EmbeddingComputeKernel::kFused) {
        return sharding_problem(type, kernel, 10, 8, ranks, widths, env);
    };
    CHECK(problem(ShardingType::kTableWise, {1}).empty());
    CHECK_THAT(problem(ShardingType::kTableWise, {0, 1}), Contains("exactly one rank"));
    CHECK_THAT(problem(ShardingType::kTableWise, {4}), Contains("out of range for world size 4"));
    CHECK_THAT(problem(ShardingType::kRowWise, {0, 1}), Contains("every rank 0..3"));
    CHECK_THAT(problem(ShardingType::kTableRowWise, {1, 2}), Contains("one node"));
    CHECK(problem(ShardingType::kTableRowWise, {2, 3}).empty());
    CHECK_THAT(problem(ShardingType::kColumnWise, {0, 1}, {3, 4}), Contains("add up to the 8"));
    CHECK_THAT(problem(ShardingType::kColumnWise, {0, 1}, {8}), Contains("one per shard"));
    CHECK_THAT(problem(ShardingType::kColumnWise, {0, 1, 2, 3, 0, 1, 2, 3, 0}),
               Contains("1 to 8 shards"));
    CHECK_THAT(problem(ShardingType::kRowWise, all_ranks(4), {4, 4}), Contains("only for column"));
    CHECK_THAT(problem(ShardingType::kDataParallel, all_ranks(4)), Contains("dense compute"));
    CHECK(problem(ShardingType::kDataParallel, all_ranks(4), {}, EmbeddingComputeKernel::kDense)
              .empty());
    // TorchRec's DENSE on a sharded table is refused, never trained as fused.
    CHECK_THAT(problem(ShardingType::kTableWise, {1}, {}, EmbeddingComputeKernel::kDense),
               Contains("the dense compute kernel is only for data_parallel tables; table_wise "
                        "tables use fused"));
    CHECK_THAT(problem(ShardingType::kRowWise, all_ranks(4), {}, EmbeddingComputeKernel::kDense),
               Contains("row_wise tables use fused"));
    CHECK_THROWS_AS(make(ShardingType::kTableWise, 10, 8, {7}, env), Error);
}

TEST_CASE("layout_problem: names the first shard that is not TorchRec's layout", "[distributed]") {
    const PlacementEnv env = env_of(4, 4);
    ParameterSharding ps = make(ShardingType::kRowWise, 10, 8, all_ranks(4), env);
    CHECK(layout_problem(ps, 10, 8, env).empty());
    ps.sharding_spec[2].shard_offsets[0] = 5;
    CHECK_THAT(layout_problem(ps, 10, 8, env), Contains("shard 2: got offsets [5, 0]"));
    ps.sharding_spec[2].shard_offsets[0] = 6;
    ps.sharding_spec.pop_back();
    CHECK_THAT(layout_problem(ps, 10, 8, env), Contains("shard 3 is missing, expected"));
    // A different table size is another layout.
    const ParameterSharding tw = make(ShardingType::kTableWise, 10, 8, {0}, env);
    CHECK_THAT(layout_problem(tw, 12, 8, env), Contains("the table_wise layout of [12, 8] has"));
    // column_wise takes its widths from the shards.
    const ParameterSharding cw = make(ShardingType::kColumnWise, 10, 8, {0, 1}, env, {5, 3});
    CHECK(layout_problem(cw, 10, 8, env).empty());
}
