// NcclProcessGroup against the same oracle cases as MpiProcessGroup (test/comm/collective_cases.h):
// a host-facing group copies each host tensor to the GPU, runs the NCCL collective there, waits,
// and copies the result back, so the cases run unchanged. Every dtype NCCL can move or reduce,
// equal and unequal segments (the grouped ncclReduce / ncclBroadcast paths), sub-groups from
// ncclCommSplit, and the deadline: a collective only some ranks join aborts the communicator,
// naming the peers that did not arrive and where they wait.
#include <catch2/catch.hpp>
#include <chrono>

#include "comm/mpi_env.h"
#include "comm/nccl_process_group.h"
#include "engine/core/cuda/cuda_runtime_api.h"
#include "test/comm/collective_cases.h"
#include "test/comm/comm_pattern.h"
#include "test/comm_cuda/host_facing_group.h"
#include "test/support/compare.h"

namespace shardrec::test {
namespace {

using comm::ReduceOp;
using comm::Work;

// One NCCL world per test process, on the node-local GPU.
std::shared_ptr<comm::ProcessGroup> nccl_world() {
    static std::shared_ptr<comm::ProcessGroup> world = [] {
        const auto& info = comm::process_info();
        const Device device = Device::cuda(info.local_rank % cuda::device_count());
        return comm::device_process_group(comm::world_process_group(), device, 60.0);
    }();
    return world;
}

HostFacingGroup staged_world() {
    auto nccl = nccl_world();
    return HostFacingGroup(nccl, dynamic_cast<comm::NcclProcessGroup&>(*nccl).device());
}

const std::vector<DType> kNcclReducible = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32,
                                           DType::kI64, DType::kI8,  DType::kU8};

}  // namespace

TEST_CASE("NcclProcessGroup: all_to_all_v moves unequal and empty segments of every dtype",
          "[cuda][comm]") {
    HostFacingGroup world = staged_world();
    for (const DType dtype : all_dtypes()) {
        INFO("dtype=" << dtype_name(dtype) << " seed=" << test_seed());
        CHECK(run_all_to_all_v(world, dtype, case_seed(dtype, 0), 1) == "");
        CHECK(run_all_to_all_v(world, dtype, case_seed(dtype, 1), 5) == "");
    }
}

TEST_CASE("NcclProcessGroup: all_reduce and reduce_scatter_v with every op and dtype",
          "[cuda][comm]") {
    HostFacingGroup world = staged_world();
    for (const DType dtype : kNcclReducible) {
        for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
            const bool is_float =
                dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
            // ncclAvg pre-multiplies by 1/size: exact here because size is a power of two.
            if (op == ReduceOp::kAvg && (!is_float || (world.size() & (world.size() - 1)) != 0))
                continue;
            INFO("dtype=" << dtype_name(dtype) << " op=" << op_name(op) << " seed=" << test_seed());
            CHECK(run_all_reduce(world, dtype, op, case_seed(dtype, 2)) == "");
            CHECK(run_reduce_scatter_v(world, dtype, op, case_seed(dtype, 3)) == "");
        }
    }
}

TEST_CASE("NcclProcessGroup: all_gather_v and broadcast of every dtype", "[cuda][comm]") {
    HostFacingGroup world = staged_world();
    for (const DType dtype : all_dtypes()) {
        INFO("dtype=" << dtype_name(dtype) << " seed=" << test_seed());
        CHECK(run_all_gather_v(world, dtype, case_seed(dtype, 4), 1) == "");
        CHECK(run_broadcast(world, dtype, world.size() - 1, case_seed(dtype, 5)) == "");
        CHECK(run_broadcast(world, dtype, 0, case_seed(dtype, 6)) == "");
    }
    world.barrier().wait();
}

TEST_CASE("NcclProcessGroup: intra- and cross-node groups from ncclCommSplit", "[cuda][comm]") {
    HostFacingGroup world = staged_world();
    const int local = comm::process_info().local_size;
    const comm::IntraAndCrossNodeGroups groups = comm::intra_and_cross_node_pg(world, local);
    CHECK(groups.intra->size() == local);
    CHECK(groups.intra->rank() == world.rank() % local);
    CHECK(groups.cross->size() == world.size() / local);
    CHECK(groups.cross->rank() == world.rank() / local);
    for (const auto& group : {groups.intra, groups.cross}) {
        INFO("group=" << group->name() << " seed=" << test_seed());
        CHECK(run_all_to_all_v(*group, DType::kF32, case_seed(DType::kF32, 20), 3) == "");
        CHECK(run_all_reduce(*group, DType::kF32, ReduceOp::kSum, case_seed(DType::kF32, 21)) ==
              "");
    }
}

TEST_CASE("NcclProcessGroup: a collective a peer never joins fails at the deadline",
          "[cuda][comm][multirank]") {
    const auto& info = comm::process_info();
    const Device device = Device::cuda(info.local_rank % cuda::device_count());
    auto group = comm::device_process_group(comm::world_process_group(), device, 2.0);
    if (info.rank == 0) {
        Tensor t = Tensor::zeros({8}, DType::kF32, device);
        const auto t0 = std::chrono::steady_clock::now();
        // The others wait in the world's (MPI) barrier below, and say so when asked.
        CHECK_THROWS_WITH(
            group->all_reduce(t, ReduceOp::kSum).wait(),
            Catch::Contains("did not complete within 2 s") && Catch::Contains("all_reduce") &&
                Catch::Contains("rank 0") &&
                Catch::Contains("rank 1 on host " + info.hosts.at(1) + " waits in barrier #") &&
                Catch::Contains("of group 'world' instead"));
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        CHECK(waited < 30.0);
    }
    comm::world_process_group()->barrier().wait();
}

TEST_CASE("NcclProcessGroup: a split group's deadline names its peers too",
          "[cuda][comm][multirank]") {
    const auto& info = comm::process_info();
    const Device device = Device::cuda(info.local_rank % cuda::device_count());
    auto group = comm::device_process_group(comm::world_process_group(), device, 2.0)
                     ->split(0, info.rank, "split");
    if (info.rank == 0) {
        Tensor t = Tensor::zeros({8}, DType::kF32, device);
        CHECK_THROWS_WITH(
            group->all_reduce(t, ReduceOp::kSum).wait(),
            Catch::Contains("did not complete within 2 s") && Catch::Contains("group 'split'") &&
                Catch::Contains("rank 1 on host " + info.hosts.at(1) + " waits in barrier #"));
    }
    comm::world_process_group()->barrier().wait();
}

TEST_CASE("NcclProcessGroup: tensors on another device are rejected before any NCCL call",
          "[cuda][comm]") {
    auto nccl = nccl_world();
    Tensor host = Tensor::zeros({4}, DType::kF32);
    CHECK_THROWS_WITH(nccl->all_reduce(host, ReduceOp::kSum),
                      Catch::Contains("the NCCL group runs on cuda"));
}

}  // namespace shardrec::test
