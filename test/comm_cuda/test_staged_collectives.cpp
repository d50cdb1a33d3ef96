// StagedProcessGroup (device tensors over the MPI group, for ranks that share a GPU) against the
// same oracle cases as MpiProcessGroup (test/comm/collective_cases.h): every dtype, equal,
// unequal and empty segments, every reduction, sub-groups. Runs with several ranks on one GPU.
#include <catch2/catch.hpp>

#include "comm/mpi_env.h"
#include "comm/staged_process_group.h"
#include "engine/core/cuda/cuda_runtime_api.h"
#include "test/comm/collective_cases.h"
#include "test/comm/comm_pattern.h"
#include "test/comm_cuda/host_facing_group.h"
#include "test/support/compare.h"

namespace shardrec::test {
namespace {

HostFacingGroup staged_world() {
    const auto& info = comm::process_info();
    return HostFacingGroup(std::make_shared<comm::StagedProcessGroup>(comm::world_process_group()),
                           Device::cuda(info.local_rank % cuda::device_count()));
}

}  // namespace

TEST_CASE("StagedProcessGroup: all_to_all_v, all_gather_v and broadcast of every dtype",
          "[cuda][comm]") {
    HostFacingGroup world = staged_world();
    for (const DType dtype : all_dtypes()) {
        INFO("dtype=" << dtype_name(dtype) << " seed=" << test_seed());
        CHECK(run_all_to_all_v(world, dtype, case_seed(dtype, 0), 1) == "");
        CHECK(run_all_to_all_v(world, dtype, case_seed(dtype, 1), 5) == "");
        CHECK(run_all_gather_v(world, dtype, case_seed(dtype, 2), 1) == "");
        CHECK(run_broadcast(world, dtype, world.size() - 1, case_seed(dtype, 3)) == "");
    }
}

TEST_CASE("StagedProcessGroup: all_reduce and reduce_scatter_v with every op", "[cuda][comm]") {
    HostFacingGroup world = staged_world();
    for (const DType dtype : {DType::kF32, DType::kI64}) {
        for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
            if (op == ReduceOp::kAvg && dtype != DType::kF32)
                continue;
            INFO("dtype=" << dtype_name(dtype) << " op=" << op_name(op) << " seed=" << test_seed());
            CHECK(run_all_reduce(world, dtype, op, case_seed(dtype, 4)) == "");
            CHECK(run_reduce_scatter_v(world, dtype, op, case_seed(dtype, 5)) == "");
        }
    }
}

TEST_CASE("StagedProcessGroup: sub-groups stage too", "[cuda][comm]") {
    HostFacingGroup world = staged_world();
    const int local = comm::process_info().local_size;
    const comm::IntraAndCrossNodeGroups groups = comm::intra_and_cross_node_pg(world, local);
    for (const auto& group : {groups.intra, groups.cross}) {
        INFO("group=" << group->name() << " seed=" << test_seed());
        CHECK(run_all_to_all_v(*group, DType::kF32, case_seed(DType::kF32, 6), 3) == "");
        CHECK(run_all_reduce(*group, DType::kF32, ReduceOp::kSum, case_seed(DType::kF32, 7)) == "");
    }
}

}  // namespace shardrec::test
