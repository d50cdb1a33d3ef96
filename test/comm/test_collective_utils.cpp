// TorchRec collective utilities over the world group and a split of it.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

#include "comm/collective_utils.h"
#include "comm/mpi_env.h"
#include "test/comm/comm_pattern.h"

namespace shardrec::test {

using Catch::Matchers::Contains;

TEST_CASE("is_leader: the leader rank of the group, or a lone process", "[comm]") {
    auto world = mpi_world();
    CHECK(comm::is_leader(nullptr));
    CHECK(comm::is_leader(world.get()) == (world->rank() == 0));
    CHECK(comm::is_leader(world.get(), world->size() - 1) == (world->rank() == world->size() - 1));
}

TEST_CASE("invoke_on_rank_and_broadcast_result: runs once, every rank gets the result", "[comm]") {
    auto world = mpi_world();
    const int root = world->size() - 1;
    int calls = 0;
    const std::string text = comm::invoke_on_rank_and_broadcast_result(*world, root, [&] {
        ++calls;
        return "plan from rank " + std::to_string(world->rank()) + std::string(3000, 'x');
    });
    CHECK(calls == (world->rank() == root ? 1 : 0));
    CHECK(text == "plan from rank " + std::to_string(root) + std::string(3000, 'x'));

    const std::vector<int64_t> numbers = comm::invoke_on_rank_and_broadcast_result(*world, 0, [&] {
        return std::vector<int64_t>{7, -1, int64_t{1} << 40};
    });
    CHECK(numbers == std::vector<int64_t>{7, -1, int64_t{1} << 40});
    const std::vector<int64_t> none = comm::invoke_on_rank_and_broadcast_result(
        *world, root, [] { return std::vector<int64_t>{}; });
    CHECK(none.empty());
    CHECK(comm::invoke_on_rank_and_broadcast_result(*world, 0, [] { return std::string(); }) == "");
}

TEST_CASE("invoke_on_rank_and_broadcast_result: a failure on the rank reaches every rank",
          "[comm]") {
    auto world = mpi_world();
    const int root = world->size() - 1;
    CHECK_THROWS_WITH(
        comm::invoke_on_rank_and_broadcast_result(
            *world, root, []() -> std::string { throw std::runtime_error("no plan fits"); }),
        Contains("failed on rank " + std::to_string(root)) && Contains("no plan fits"));
    CHECK_THROWS_WITH(comm::invoke_on_rank_and_broadcast_result(*world, world->size(),
                                                                [] { return std::string("x"); }),
                      Contains("is not in group 'world'"));
}

TEST_CASE("all_gather_int64: one value per rank, in rank order", "[comm]") {
    auto world = mpi_world();
    std::vector<int64_t> expected;
    for (int r = 0; r < world->size(); ++r) {
        expected.push_back(100 + int64_t{r} * r);
    }
    CHECK(comm::all_gather_int64(*world, 100 + int64_t{world->rank()} * world->rank()) == expected);
    // Within a sub-group: the parity groups of the world.
    auto group = world->split(world->rank() % 2, world->rank(), "parity");
    std::vector<int64_t> parity;
    for (int r = world->rank() % 2; r < world->size(); r += 2) {
        parity.push_back(-r);
    }
    CHECK(comm::all_gather_int64(*group, -world->rank()) == parity);
}

}  // namespace shardrec::test

TEST_CASE("block_local_size: consecutive equal nodes give their size; other placements are named",
          "[comm]") {
    using shardrec::comm::block_local_size;
    CHECK(block_local_size({"a"}) == 1);
    CHECK(block_local_size({"a", "a", "a"}) == 3);
    CHECK(block_local_size({"a", "a", "b", "b"}) == 2);
    CHECK(block_local_size({"a", "b", "c"}) == 1);
    // Cyclic (srun --distribution=cyclic, mpirun --map-by node).
    CHECK_THROWS_WITH(
        block_local_size({"a", "b", "a", "b"}),
        Catch::Contains("the ranks of host b are 1, 3") && Catch::Contains("--distribution=block"));
    // Nodes of different sizes.
    CHECK_THROWS_WITH(block_local_size({"a", "b", "b"}),
                      Catch::Contains("the ranks of host b are 1, 2"));
    CHECK_THROWS_WITH(block_local_size({"a", "a", "a", "b"}),
                      Catch::Contains("the ranks of host b are 3") && Catch::Contains("3 on a"));
    CHECK_THROWS_WITH(block_local_size({"a", "a", "b", "a"}),
                      Catch::Contains("the ranks of host b are 2") && Catch::Contains("3 on a"));
}
