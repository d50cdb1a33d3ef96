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
#include "comm/staged_process_group.h"
#include "test/comm/collective_cases.h"
#include "test/comm/comm_pattern.h"
#include "test/support/compare.h"

namespace shardrec::test {
namespace {

using comm::ReduceOp;

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

// Its device staging runs on a GPU (test_comm_staged); here, host tensors go through as they are.
TEST_CASE("StagedProcessGroup: host tensors go to its host group, sub-groups stage too", "[comm]") {
    comm::StagedProcessGroup staged(mpi_world());
    CHECK(staged.rank() == mpi_world()->rank());
    CHECK(staged.size() == mpi_world()->size());
    CHECK(staged.name() == "world");
    CHECK(run_all_to_all_v(staged, DType::kF32, case_seed(DType::kF32, 40), 3) == "");
    CHECK(run_all_reduce(staged, DType::kF32, ReduceOp::kAvg, case_seed(DType::kF32, 41)) == "");
    CHECK(run_reduce_scatter_v(staged, DType::kI64, ReduceOp::kSum, case_seed(DType::kI64, 42)) ==
          "");
    CHECK(run_all_gather_v(staged, DType::kBF16, case_seed(DType::kBF16, 43), 2) == "");
    CHECK(run_broadcast(staged, DType::kI32, staged.size() - 1, case_seed(DType::kI32, 44)) == "");
    const auto half = staged.split(staged.rank() % 2, staged.rank(), "half");
    REQUIRE(dynamic_cast<comm::StagedProcessGroup*>(half.get()) != nullptr);
    CHECK(half->name() == "half");
    CHECK(run_all_to_all_v(*half, DType::kF32, case_seed(DType::kF32, 45), 1) == "");
    staged.barrier().wait();
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
