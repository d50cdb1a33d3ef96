// Every collective of MpiProcessGroup against the oracle each rank computes locally from seeds
// (comm_pattern.h): unequal and empty segments, every dtype a collective allows, every ReduceOp,
// and the chunked / blocked paths that large counts take (driven here by a small max_count).
#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <numeric>
#include <utility>

#include "comm/mpi_env.h"
#include "comm/mpi_process_group.h"
#include "test/comm/comm_pattern.h"
#include "test/support/compare.h"

namespace shardrec::test {
namespace {

using comm::ReduceOp;

constexpr double kPoison = 100;  // outside every pattern value and every reduction of them

// Restores the world group's max_count when a test that lowered it ends, even by a failure.
class MaxCountScope {
public:
    MaxCountScope(comm::MpiProcessGroup& pg, int64_t max_count) : pg_(pg) {
        pg_.set_max_count(max_count);
    }

    ~MaxCountScope() { pg_.set_max_count(INT_MAX); }

    MaxCountScope(const MaxCountScope&) = delete;
    MaxCountScope& operator=(const MaxCountScope&) = delete;

private:
    comm::MpiProcessGroup& pg_;
};

Tensor poisoned(int64_t n, DType dtype) {
    Tensor t = Tensor::empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
        store_value(t, i, kPoison);
    }
    return t;
}

const char* op_name(ReduceOp op) {
    switch (op) {
        case ReduceOp::kSum:
            return "sum";
        case ReduceOp::kAvg:
            return "avg";
        case ReduceOp::kMax:
            return "max";
        case ReduceOp::kMin:
            return "min";
    }
    return "?";
}

// The reduction over ranks of element i of slot 0, as the engine computes it (kAvg: f32 sum, then
// one f32 division).
double reduce_over_ranks(uint64_t seed, int world_size, int64_t i, DType dtype, ReduceOp op) {
    double acc = static_cast<double>(pattern_value(seed, 0, 0, i, dtype));
    for (int src = 1; src < world_size; ++src) {
        const double v = static_cast<double>(pattern_value(seed, src, 0, i, dtype));
        acc = op == ReduceOp::kMax   ? std::max(acc, v)
              : op == ReduceOp::kMin ? std::min(acc, v)
                                     : acc + v;
    }
    if (op == ReduceOp::kAvg) {
        return static_cast<float>(acc) / static_cast<float>(world_size);
    }
    return acc;
}

// Rank src sends unit * [0, 4) elements to dst, and none to the next rank (an empty segment).
int64_t a2a_split(uint64_t seed, int src, int dst, int world_size, int64_t unit) {
    if (world_size > 1 && dst == (src + 1) % world_size) {
        return 0;
    }
    return unit * pattern_count(seed, src, dst, 4);
}

// Rank me's input and output splits.
std::pair<std::vector<int64_t>, std::vector<int64_t>> a2a_splits(uint64_t seed,
                                                                 int me,
                                                                 int n,
                                                                 int64_t unit) {
    std::vector<int64_t> in_splits(n), out_splits(n);
    for (int r = 0; r < n; ++r) {
        in_splits[r] = a2a_split(seed, me, r, n, unit);
        out_splits[r] = a2a_split(seed, r, me, n, unit);
    }
    return {in_splits, out_splits};
}

std::vector<int64_t> all_gather_splits(uint64_t seed, int n, int64_t unit) {
    std::vector<int64_t> splits(n);
    for (int r = 0; r < n; ++r) {
        splits[r] = unit * pattern_count(seed, r, 77, 4);
    }
    return splits;
}

// Whether, with these splits, every rank's counts fit max_count and some rank moves blocks of a
// derived type (worked out for all ranks locally, so every rank agrees).
bool uses_blocks(const std::vector<std::vector<int64_t>>& splits_per_rank, int64_t max_count) {
    bool blocked = false;
    for (const auto& splits : splits_per_rank) {
        try {
            blocked |= comm::detail::mpi_blocked_splits("test", splits, max_count).block > 1;
        } catch (const Error&) {
            return false;
        }
    }
    return blocked;
}

// The first seed from `seed` whose all_to_all_v and all_gather_v splits use blocks.
uint64_t seed_using_blocks(uint64_t seed, int n, int64_t unit, int64_t max_count) {
    for (;; ++seed) {
        std::vector<std::vector<int64_t>> splits;
        for (int me = 0; me < n; ++me) {
            auto [in, out] = a2a_splits(seed, me, n, unit);
            const std::vector<int64_t> gathered = all_gather_splits(seed, n, unit);
            splits.insert(splits.end(), {in, out, gathered, {gathered[me]}});
        }
        if (uses_blocks(splits, max_count)) {
            return seed;
        }
    }
}

std::string run_all_to_all_v(comm::ProcessGroup& pg, DType dtype, uint64_t seed, int64_t unit) {
    const int n = pg.size();
    const int me = pg.rank();
    const auto [in_splits, out_splits] = a2a_splits(seed, me, n, unit);
    Tensor input = poisoned(std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0}), dtype);
    Tensor expected =
        poisoned(std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0}), dtype);
    for (int r = 0, in_at = 0, out_at = 0; r < n; ++r) {
        for (int64_t j = 0; j < in_splits[r]; ++j) {
            store_value(input, in_at++, pattern_value(seed, me, r, j, dtype));
        }
        for (int64_t j = 0; j < out_splits[r]; ++j) {
            store_value(expected, out_at++, pattern_value(seed, r, me, j, dtype));
        }
    }
    Tensor output = poisoned(expected.numel(), dtype);
    pg.all_to_all_v(input, in_splits, output, out_splits).wait();
    return first_mismatch(output, expected);
}

std::string run_all_reduce(comm::ProcessGroup& pg, DType dtype, ReduceOp op, uint64_t seed) {
    constexpr int64_t kCount = 37;
    Tensor t = Tensor::empty({kCount}, dtype);
    Tensor expected = Tensor::empty({kCount}, dtype);
    for (int64_t i = 0; i < kCount; ++i) {
        store_value(t, i, pattern_value(seed, pg.rank(), 0, i, dtype));
        store_value(expected, i, reduce_over_ranks(seed, pg.size(), i, dtype, op));
    }
    pg.all_reduce(t, op).wait();
    return first_mismatch(t, expected);
}

std::string run_reduce_scatter_v(comm::ProcessGroup& pg, DType dtype, ReduceOp op, uint64_t seed) {
    std::vector<int64_t> splits(pg.size());
    for (int r = 0; r < pg.size(); ++r) {
        splits[r] = pattern_count(seed, r, 99, 6);
    }
    const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    const int64_t my_offset =
        std::accumulate(splits.begin(), splits.begin() + pg.rank(), int64_t{0});
    Tensor input = Tensor::empty({total}, dtype);
    for (int64_t k = 0; k < total; ++k) {
        store_value(input, k, pattern_value(seed, pg.rank(), 0, k, dtype));
    }
    Tensor expected = Tensor::empty({splits[pg.rank()]}, dtype);
    for (int64_t j = 0; j < expected.numel(); ++j) {
        store_value(expected, j, reduce_over_ranks(seed, pg.size(), my_offset + j, dtype, op));
    }
    Tensor output = poisoned(expected.numel(), dtype);
    pg.reduce_scatter_v(input, splits, output, op).wait();
    return first_mismatch(output, expected);
}

std::string run_all_gather_v(comm::ProcessGroup& pg, DType dtype, uint64_t seed, int64_t unit) {
    const std::vector<int64_t> splits = all_gather_splits(seed, pg.size(), unit);
    Tensor input = Tensor::empty({splits[pg.rank()]}, dtype);
    for (int64_t j = 0; j < input.numel(); ++j) {
        store_value(input, j, pattern_value(seed, pg.rank(), 0, j, dtype));
    }
    Tensor expected =
        Tensor::empty({std::accumulate(splits.begin(), splits.end(), int64_t{0})}, dtype);
    for (int r = 0, at = 0; r < pg.size(); ++r) {
        for (int64_t j = 0; j < splits[r]; ++j) {
            store_value(expected, at++, pattern_value(seed, r, 0, j, dtype));
        }
    }
    Tensor output = poisoned(expected.numel(), dtype);
    pg.all_gather_v(input, output, splits).wait();
    return first_mismatch(output, expected);
}

std::string run_broadcast(comm::ProcessGroup& pg, DType dtype, int root, uint64_t seed) {
    constexpr int64_t kCount = 29;
    Tensor t = poisoned(kCount, dtype);
    Tensor expected = Tensor::empty({kCount}, dtype);
    for (int64_t i = 0; i < kCount; ++i) {
        store_value(expected, i, pattern_value(seed, root, 0, i, dtype));
    }
    if (pg.rank() == root) {
        t.copy_from(expected);
    }
    pg.broadcast(t, root).wait();
    return first_mismatch(t, expected);
}

uint64_t case_seed(DType dtype, int variant) {
    return test_seed() * 131 + static_cast<uint64_t>(dtype) * 7 + static_cast<uint64_t>(variant);
}

}  // namespace

TEST_CASE("MpiProcessGroup: world group rank and size match the bootstrap", "[comm]") {
    auto world = mpi_world();
    CHECK(world->rank() == comm::process_info().rank);
    CHECK(world->size() == comm::process_info().world_size);
    CHECK(world->name() == "world");
    CHECK(comm::world_process_group() == comm::world_process_group());
}

TEST_CASE("MpiProcessGroup: all_to_all_v moves unequal and empty segments of every dtype",
          "[comm]") {
    auto world = mpi_world();
    for (const DType dtype : all_dtypes()) {
        INFO("dtype=" << dtype_name(dtype) << " seed=" << test_seed());
        CHECK(run_all_to_all_v(*world, dtype, case_seed(dtype, 0), 1) == "");
        CHECK(run_all_to_all_v(*world, dtype, case_seed(dtype, 1), 5) == "");
    }
}

TEST_CASE("MpiProcessGroup: all_reduce sums, averages, maxes and mins every reducible dtype",
          "[comm]") {
    auto world = mpi_world();
    for (const DType dtype : reducible_dtypes()) {
        for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
            if (op == ReduceOp::kAvg && dtype != DType::kF32) {
                continue;
            }
            INFO("dtype=" << dtype_name(dtype) << " op=" << op_name(op) << " seed=" << test_seed());
            CHECK(run_all_reduce(*world, dtype, op, case_seed(dtype, 2)) == "");
        }
    }
}

TEST_CASE("MpiProcessGroup: reduce_scatter_v gives each rank its reduced segment", "[comm]") {
    auto world = mpi_world();
    for (const DType dtype : reducible_dtypes()) {
        for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
            if (op == ReduceOp::kAvg && dtype != DType::kF32) {
                continue;
            }
            INFO("dtype=" << dtype_name(dtype) << " op=" << op_name(op) << " seed=" << test_seed());
            CHECK(run_reduce_scatter_v(*world, dtype, op, case_seed(dtype, 3)) == "");
        }
    }
}

TEST_CASE("MpiProcessGroup: all_gather_v concatenates unequal segments of every dtype", "[comm]") {
    auto world = mpi_world();
    for (const DType dtype : all_dtypes()) {
        INFO("dtype=" << dtype_name(dtype) << " seed=" << test_seed());
        CHECK(run_all_gather_v(*world, dtype, case_seed(dtype, 4), 1) == "");
    }
}

TEST_CASE("MpiProcessGroup: broadcast from the last rank reaches every rank", "[comm]") {
    auto world = mpi_world();
    for (const DType dtype : all_dtypes()) {
        INFO("dtype=" << dtype_name(dtype) << " seed=" << test_seed());
        CHECK(run_broadcast(*world, dtype, world->size() - 1, case_seed(dtype, 5)) == "");
        CHECK(run_broadcast(*world, dtype, 0, case_seed(dtype, 6)) == "");
    }
}

TEST_CASE("MpiProcessGroup: counts beyond max_count go in chunks and blocks", "[comm]") {
    auto world = mpi_world();
    const int n = world->size();
    SECTION("all_reduce and broadcast are chunked") {
        const MaxCountScope scope(*world, 5);
        for (const DType dtype : {DType::kF32, DType::kI64}) {
            INFO("dtype=" << dtype_name(dtype) << " seed=" << test_seed());
            CHECK(run_all_reduce(*world, dtype, ReduceOp::kSum, case_seed(dtype, 7)) == "");
            CHECK(run_all_reduce(*world, dtype, ReduceOp::kMax, case_seed(dtype, 8)) == "");
            CHECK(run_broadcast(*world, dtype, n - 1, case_seed(dtype, 9)) == "");
        }
    }
    SECTION("all_to_all_v and all_gather_v move blocks of a derived type") {
        // Segments are multiples of 4 elements, and a seed is picked for which some rank's
        // counts exceed max_count while blocks of their gcd fit on every rank.
        const int64_t max_count = 4 * n;
        const MaxCountScope scope(*world, max_count);
        for (const DType dtype : {DType::kF32, DType::kBF16, DType::kU8}) {
            const uint64_t seed = seed_using_blocks(case_seed(dtype, 10), n, 4, max_count);
            INFO("dtype=" << dtype_name(dtype) << " seed=" << seed);
            CHECK(run_all_to_all_v(*world, dtype, seed, 4) == "");
            CHECK(run_all_gather_v(*world, dtype, seed, 4) == "");
        }
    }
    SECTION("reduce_scatter_v within max_count") {
        const MaxCountScope scope(*world, 5);
        CHECK(run_reduce_scatter_v(*world, DType::kF32, ReduceOp::kSum,
                                   case_seed(DType::kF32, 12)) == "");
    }
}

}  // namespace shardrec::test
