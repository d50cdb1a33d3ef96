// The process group for a device: the MPI group for host tensors; for CUDA tensors NCCL over the
// same ranks when each has a GPU of its own, else the host group through staging copies.
#include "comm/mpi_env.h"
#include "comm/nccl_process_group.h"
#include "comm/staged_process_group.h"
#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/core/log.h"

namespace shardrec::comm {

std::shared_ptr<ProcessGroup> device_process_group(const std::shared_ptr<ProcessGroup>& host_group,
                                                   Device device,
                                                   double timeout_s) {
    SR_CHECK(host_group != nullptr, "device_process_group: no host group");
    if (device.is_cpu())
        return host_group;
#if SHARDREC_WITH_CUDA
    // NCCL puts one communicator rank on a device: ranks that share a GPU (more ranks on a node
    // than it has GPUs) stage through the host. Every rank must take the same branch.
    Tensor own_gpu =
        Tensor::from_vector<float>({cuda::device_count() >= process_info().local_size ? 1.f : 0.f});
    host_group->all_reduce(own_gpu, ReduceOp::kMin).wait();
    if (own_gpu.data<float>()[0] == 0.f) {
        log::root().info(
            "group {}: ranks share a GPU, so its device collectives go through host "
            "buffers (NCCL needs a GPU per rank)",
            host_group->name());
        return std::make_shared<StagedProcessGroup>(host_group);
    }
    return NcclProcessGroup::create(host_group, device, timeout_s, host_group->name());
#else
    (void)timeout_s;
    SR_CHECK(false,
             "a process group on {}: shardrec was built without CUDA (configure with "
             "-DSHARDREC_CUDA=ON)",
             device.str());
    return nullptr;
#endif
}

}  // namespace shardrec::comm
