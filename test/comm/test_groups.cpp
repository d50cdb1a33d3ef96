// Sub-groups (split, intra_and_cross_node_pg), several Works in flight, the deadline on a wait,
// and the argument errors every rank detects locally (so no rank is left in a collective).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "comm/collective_utils.h"
#include "comm/mpi_env.h"
#include "comm/mpi_process_group.h"
#include "comm/peer_probe.h"
#include "test/comm/comm_pattern.h"
#include "test/support/compare.h"

namespace shardrec::test {
namespace {

using Catch::Matchers::Contains;
using comm::ReduceOp;

// A group over a communicator of its own (not split from the world, whose failure it would
// share).
std::shared_ptr<comm::MpiProcessGroup> own_group(const std::string& name, double timeout_s) {
    MPI_Comm c = MPI_COMM_NULL;
    REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &c) == MPI_SUCCESS);
    return std::make_shared<comm::MpiProcessGroup>(c, name, timeout_s);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The world ranks of a group, in group-rank order, as the group's own all_gather_v reports them.
std::vector<int64_t> members(comm::ProcessGroup& pg) {
    return comm::all_gather_int64(pg, comm::process_info().rank);
}

void check_node_groups(const comm::IntraAndCrossNodeGroups& groups, int local_size) {
    const int rank = comm::process_info().rank;
    const int world_size = comm::process_info().world_size;
    INFO("local_size=" << local_size);
    REQUIRE(groups.intra->size() == local_size);
    REQUIRE(groups.cross->size() == world_size / local_size);
    CHECK(groups.intra->rank() == rank % local_size);
    CHECK(groups.cross->rank() == rank / local_size);
    CHECK(groups.intra->name() == "intra_node");
    CHECK(groups.cross->name() == "cross_node");
    std::vector<int64_t> intra(static_cast<size_t>(local_size));
    std::iota(intra.begin(), intra.end(), rank / local_size * local_size);
    std::vector<int64_t> cross;
    for (int r = rank % local_size; r < world_size; r += local_size) {
        cross.push_back(r);
    }
    CHECK(members(*groups.intra) == intra);
    CHECK(members(*groups.cross) == cross);
}

}  // namespace

TEST_CASE("MpiProcessGroup: split orders each color's ranks by key", "[comm]") {
    auto world = mpi_world();
    const int rank = world->rank();
    const int n = world->size();
    // Odd and even ranks, each group in reverse world order.
    auto group = world->split(rank % 2, n - rank, "parity");
    std::vector<int64_t> expected;
    for (int r = n - 1; r >= 0; --r) {
        if (r % 2 == rank % 2) {
            expected.push_back(r);
        }
    }
    REQUIRE(group->size() == static_cast<int>(expected.size()));
    CHECK(group->name() == "parity");
    CHECK(expected[static_cast<size_t>(group->rank())] == rank);
    CHECK(members(*group) == expected);

    Tensor t = Tensor::from_vector(std::vector<int64_t>{rank + 1, 1});
    group->all_reduce(t, ReduceOp::kSum).wait();
    int64_t sum = 0;
    for (const int64_t r : expected) {
        sum += r + 1;
    }
    CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{sum, group->size()});
}

TEST_CASE("intra_and_cross_node_pg: nodes are consecutive blocks of local_size ranks", "[comm]") {
    auto world = mpi_world();
    const int n = world->size();
    for (int local_size = 1; local_size <= n; ++local_size) {
        if (n % local_size == 0) {
            check_node_groups(comm::intra_and_cross_node_pg(*world, local_size), local_size);
        }
    }
    // The bootstrap's local size (SHARDREC_LOCAL_SIZE emulates several nodes on one host).
    const int bootstrap_local = comm::process_info().local_size;
    if (const char* k = std::getenv("SHARDREC_LOCAL_SIZE")) {
        CHECK(bootstrap_local == std::atoi(k));
    }
    check_node_groups(comm::intra_and_cross_node_pg(*world, bootstrap_local), bootstrap_local);
    CHECK_THROWS_WITH(comm::intra_and_cross_node_pg(*world, n + 1),
                      Contains("intra_and_cross_node_pg") && Contains("does not divide"));
}

TEST_CASE("Work: several collectives in flight complete when waited in reverse order", "[comm]") {
    auto world = mpi_world();
    const int rank = world->rank();
    const int n = world->size();

    std::vector<int64_t> splits(static_cast<size_t>(n), 2);
    Tensor a2a_in = Tensor::empty({2 * n}, DType::kI64);
    for (int64_t i = 0; i < 2 * n; ++i) {
        a2a_in.data<int64_t>()[i] = rank * 1000 + i;
    }
    Tensor a2a_out = Tensor::zeros({2 * n}, DType::kI64);
    Tensor sum = Tensor::from_vector(std::vector<float>(7, static_cast<float>(rank)));
    Tensor gathered = Tensor::zeros({n}, DType::kI32);
    Tensor mine = Tensor::from_vector(std::vector<int32_t>{rank * 3});
    Tensor bcast = Tensor::from_vector(std::vector<uint8_t>(5, static_cast<uint8_t>(rank + 1)));

    std::vector<comm::Work> works;
    works.push_back(world->all_to_all_v(a2a_in, splits, a2a_out, splits));
    works.push_back(world->all_reduce(sum, ReduceOp::kSum));
    works.push_back(world->barrier());
    works.push_back(world->all_gather_v(mine, gathered, std::vector<int64_t>(n, 1)));
    works.push_back(world->broadcast(bcast, n - 1));
    for (auto it = works.rbegin(); it != works.rend(); ++it) {
        it->wait();
    }
    for (auto& w : works) {
        w.wait();  // a second wait is a no-op
    }

    for (int src = 0; src < n; ++src) {
        CHECK(a2a_out.data<int64_t>()[2 * src] == src * 1000 + 2 * rank);
        CHECK(a2a_out.data<int64_t>()[2 * src + 1] == src * 1000 + 2 * rank + 1);
        CHECK(gathered.data<int32_t>()[src] == src * 3);
    }
    CHECK(sum.to_vector<float>() == std::vector<float>(7, static_cast<float>(n * (n - 1) / 2)));
    CHECK(bcast.to_vector<uint8_t>() == std::vector<uint8_t>(5, static_cast<uint8_t>(n)));
}

TEST_CASE("Work: is_completed polls, and a dropped Work is waited for", "[comm]") {
    auto world = mpi_world();
    const int n = world->size();
    Tensor t = Tensor::from_vector(std::vector<int64_t>(3, 1));
    comm::Work work = world->all_reduce(t, ReduceOp::kSum);
    while (!work.is_completed()) {
    }
    CHECK(t.to_vector<int64_t>() == std::vector<int64_t>(3, n));
    work.wait();
    { const comm::Work dropped = world->all_reduce(t, ReduceOp::kSum); }
    CHECK(t.to_vector<int64_t>() == std::vector<int64_t>(3, int64_t{n} * n));
    CHECK(comm::Work().is_completed());
}

TEST_CASE("MpiProcessGroup: a wait on a peer that never comes fails after the timeout",
          "[comm][multirank]") {
    auto world = mpi_world();
    if (world->size() < 2) {
        return;
    }
    // A group of its own: the abandoned barrier must not disturb the world's collectives, and its
    // failure is not the world's.
    auto group = own_group("late_peer", 0.3);
    if (world->rank() == 0) {
        comm::Work work = group->barrier();
        CHECK_THROWS_WITH(work.wait(), Contains("rank 0/") &&
                                           Contains("barrier on group 'late_peer'") &&
                                           Contains("did not complete within 0.3 s"));
        world->barrier().wait();
        world->barrier().wait();  // rank 0 polls here while the late ranks finish their barrier
    } else {
        world->barrier().wait();
        group->barrier().wait();
        world->barrier().wait();
    }
}

TEST_CASE(
    "MpiProcessGroup: a stalled peer fails the wait within the timeout, naming it; then the "
    "group fails at once",
    "[comm][multirank]") {
    auto world = mpi_world();
    if (world->size() < 2) {
        return;
    }
    constexpr double kTimeoutS = 1.0;
    auto group = own_group("stalled", kTimeoutS);
    Tensor a = Tensor::from_vector(std::vector<int64_t>{1});
    Tensor b = Tensor::from_vector(std::vector<int64_t>{1});
    world->barrier().wait();
    if (world->rank() == 1) {
        // Stalls outside communication (its probe service says so); then it joins, which
        // completes the collectives the others abandoned.
        std::this_thread::sleep_for(std::chrono::duration<double>(2.5 * kTimeoutS));
        group->all_reduce(a, ReduceOp::kSum).wait();
        group->all_reduce(b, ReduceOp::kSum).wait();
        group->barrier().wait();
        world->barrier().wait();
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    comm::Work first = group->all_reduce(a, ReduceOp::kSum);
    comm::Work second = group->all_reduce(b, ReduceOp::kSum);
    {
        const comm::Work dropped = group->barrier();
        std::string message;
        try {
            first.wait();
        } catch (const Error& e) {
            message = e.what();
        }
        const std::string host1 = comm::process_info().hosts.at(1);
        CHECK_THAT(message, Contains("all_reduce on group 'stalled'") &&
                                Contains("its collective #1) did not complete within 1 s") &&
                                Contains("rank 1 on host " + host1 +
                                         " has not reached it (it computes outside "
                                         "communication: its last collective, barrier #"));
        // The peers are probed in the timeout's last tenth: the wait fails when it is up.
        CHECK(seconds_since(t0) >= 0.99 * kTimeoutS);
        CHECK(seconds_since(t0) < 1.2 * kTimeoutS);
        // Nothing waits on the failed group again: the next wait and a new collective throw the
        // first error at once, and `dropped` goes without waiting.
        const auto t1 = std::chrono::steady_clock::now();
        CHECK_THROWS_WITH(second.wait(), message);
        CHECK_THROWS_WITH((void)group->all_reduce(a, ReduceOp::kSum), message);
        CHECK(seconds_since(t1) < 0.1);
    }
    CHECK(seconds_since(t0) < 1.2 * kTimeoutS);
    world->barrier().wait();
}

TEST_CASE(
    "MpiProcessGroup: a peer that arrives while it is probed, within the timeout, completes "
    "the wait",
    "[comm][multirank]") {
    auto world = mpi_world();
    if (world->size() < 2) {
        return;
    }
    // The probes run in the last tenth of the timeout (3.6 s to 4 s here); rank 1 arrives at
    // 3.75 s, in the middle of them.
    constexpr double kTimeoutS = 4.0;
    auto group = own_group("late_but_in_time", kTimeoutS);
    Tensor a = Tensor::from_vector(std::vector<int64_t>{1});
    world->barrier().wait();
    if (world->rank() == 1) {
        std::this_thread::sleep_for(std::chrono::duration<double>(0.9375 * kTimeoutS));
    }
    group->all_reduce(a, ReduceOp::kSum).wait();
    CHECK(a.data<int64_t>()[0] == world->size());
    world->barrier().wait();
}

TEST_CASE("describe_missing_peers: names at most 16 peers and counts the rest",
          "[comm][multirank]") {
    auto world = mpi_world();
    if (world->size() < 2) {
        return;
    }
    world->barrier().wait();
    if (comm::process_info().rank == 0) {
        // Rank 1 twenty times over (a wide group stood in for): it waits in the world's barrier.
        const std::vector<int> peers(20, 1);
        const std::string line =
            "rank 1 on host " + comm::process_info().hosts.at(1) + " waits in barrier #";
        const std::string text =
            comm::describe_missing_peers("barrier #1 of group 'g'", peers, 2.0).value_or("");
        size_t named = 0;
        for (size_t at = text.find(line); at != std::string::npos; at = text.find(line, at + 1)) {
            ++named;
        }
        CHECK(named == 16);
        CHECK_THAT(text, Contains("; and 4 more ranks"));
    }
    world->barrier().wait();
}

TEST_CASE("MpiProcessGroup: a stopped peer is named as not answering", "[comm][multirank]") {
    auto world = mpi_world();
    const comm::ProcessInfo& info = comm::process_info();
    // Rank 0 resumes rank 1 by its pid, so both must run on one host (every rank decides alike).
    if (world->size() < 2 || info.hosts.at(0) != info.hosts.at(1)) {
        return;
    }
    const std::vector<int64_t> pids = comm::all_gather_int64(*world, getpid());
    MPI_Comm c = MPI_COMM_NULL;
    REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, info.rank < 2 ? 0 : 1, info.rank, &c) == MPI_SUCCESS);
    auto pair = std::make_shared<comm::MpiProcessGroup>(c, "stopped", 1.0);
    world->barrier().wait();
    if (info.rank == 1) {
        // Every thread stops, the probe service's too; after rank 0's SIGCONT it joins the
        // barrier rank 0 abandoned.
        raise(SIGSTOP);
        pair->barrier().wait();
    } else if (info.rank == 0) {
        std::string message;
        try {
            pair->barrier().wait();
        } catch (const Error& e) {
            message = e.what();
        }
        kill(static_cast<pid_t>(pids.at(1)), SIGCONT);
        CHECK_THAT(message, Contains("rank 1 on host " + info.hosts.at(1) +
                                     " has not reached it (no answer within ") &&
                                Contains("or the process is stopped)"));
    }
    world->barrier().wait();
}

TEST_CASE("MpiProcessGroup: a peer waiting in another collective is named with it",
          "[comm][multirank]") {
    auto world = mpi_world();
    if (world->size() < 2) {
        return;
    }
    auto group = own_group("diverged", 0.5);
    auto other = own_group("other", 600);
    if (world->rank() == 1) {
        // Waits in a collective of another group that the others have not called yet.
        other->barrier().wait();
    } else {
        std::string message;
        try {
            group->barrier().wait();
        } catch (const Error& e) {
            message = e.what();
        }
        CHECK_THAT(message, Contains("barrier on group 'diverged'") &&
                                Contains("rank 1 on host " + comm::process_info().hosts.at(1) +
                                         " waits in barrier #1 of group 'other' instead"));
        other->barrier().wait();
    }
    // Rank 1 joins the barrier the others abandoned.
    if (world->rank() == 1) {
        group->barrier().wait();
    }
    world->barrier().wait();
}

TEST_CASE("MpiProcessGroup: arguments that do not fit throw, naming the collective", "[comm]") {
    auto world = mpi_world();
    const int n = world->size();
    Tensor f = Tensor::zeros({2 * n}, DType::kF32);
    Tensor out = Tensor::zeros({2 * n}, DType::kF32);
    const std::vector<int64_t> twos(static_cast<size_t>(n), 2);
    const std::vector<int64_t> short_splits(static_cast<size_t>(n) + 1, 1);

    CHECK_THROWS_WITH((void)world->all_to_all_v(f, short_splits, out, twos),
                      Contains("all_to_all_v") && Contains("input_splits has"));
    CHECK_THROWS_WITH((void)world->all_to_all_v(f, twos, out, std::vector<int64_t>(n, 1)),
                      Contains("all_to_all_v") && Contains("output_splits sum to"));
    Tensor i64 = Tensor::zeros({2 * n}, DType::kI64);
    CHECK_THROWS_WITH((void)world->all_to_all_v(f, twos, i64, twos),
                      Contains("all_to_all_v") && Contains("input is f32"));
    Tensor h = Tensor::zeros({4}, DType::kBF16);
    CHECK_THROWS_WITH((void)world->all_reduce(h, ReduceOp::kSum),
                      Contains("all_reduce") && Contains("cannot reduce bf16"));
    CHECK_THROWS_WITH((void)world->all_reduce(i64, ReduceOp::kAvg),
                      Contains("all_reduce") && Contains("kAvg needs a float"));
    Tensor mine = Tensor::zeros({3}, DType::kF32);
    CHECK_THROWS_WITH((void)world->reduce_scatter_v(f, twos, mine, ReduceOp::kSum),
                      Contains("reduce_scatter_v") && Contains("output is f32[3]"));
    CHECK_THROWS_WITH((void)world->all_gather_v(mine, out, twos),
                      Contains("all_gather_v") && Contains("input is f32[3]"));
    CHECK_THROWS_WITH((void)world->broadcast(f, n), Contains("broadcast") && Contains("root"));
    CHECK_THROWS_WITH((void)world->split(-1, 0, "bad"), Contains("color -1"));
    // Counts past MPI's int: what blocks cannot fix is refused before anything is posted.
    world->set_max_count(1);
    std::vector<int64_t> all_to_first(static_cast<size_t>(n), 0);
    all_to_first[0] = 2 * n;
    Tensor first_out =
        Tensor::zeros({all_to_first[static_cast<size_t>(world->rank())]}, DType::kF32);
    CHECK_THROWS_WITH((void)world->reduce_scatter_v(f, all_to_first, first_out, ReduceOp::kSum),
                      Contains("reduce_scatter_v") && Contains("exceeds MPI's int count"));
    Tensor odd = Tensor::zeros({7 * n}, DType::kF32);
    const std::vector<int64_t> sevens(static_cast<size_t>(n), 7);
    CHECK_THROWS_WITH((void)world->all_gather_v(Tensor::zeros({7}, DType::kF32), odd, sevens),
                      Contains("all_gather_v") && Contains("exceeds MPI's int counts"));
    world->set_max_count(INT_MAX);
}

TEST_CASE("MpiProcessGroup: blocked splits keep MPI's int counts for huge segments", "[comm]") {
    using comm::detail::mpi_blocked_splits;
    const int64_t k2G = int64_t{1} << 31;
    const auto fits = mpi_blocked_splits("all_to_all_v", {3, 0, 5}, INT_MAX);
    CHECK(fits.block == 1);
    CHECK(fits.counts == std::vector<int>{3, 0, 5});
    CHECK(fits.displs == std::vector<int>{0, 3, 3});
    // gcd 2^31 is itself too large a block: halved once.
    const auto big = mpi_blocked_splits("all_to_all_v", {3 * k2G, k2G, 0}, INT_MAX);
    CHECK(big.block == k2G / 2);
    CHECK(big.counts == std::vector<int>{6, 2, 0});
    CHECK(big.displs == std::vector<int>{0, 6, 8});
    // A displacement past INT_MAX with small counts: blocks of the gcd.
    const auto far = mpi_blocked_splits("all_gather_v", {k2G, 6}, INT_MAX);
    CHECK(far.block == 2);
    CHECK(far.counts == std::vector<int>{static_cast<int>(k2G / 2), 3});
    CHECK(far.displs == std::vector<int>{0, static_cast<int>(k2G / 2)});
    CHECK_THROWS_WITH(mpi_blocked_splits("all_to_all_v", {k2G + 1, 1}, INT_MAX),
                      Contains("all_to_all_v") && Contains("exceeds MPI's int counts"));
}

}  // namespace shardrec::test
