// The process group for a device: the MPI group for host tensors, NCCL over the same ranks for
// CUDA tensors (only in a CUDA build).
#include "comm/nccl_process_group.h"

namespace shardrec::comm {

std::shared_ptr<ProcessGroup> device_process_group(const std::shared_ptr<ProcessGroup>& host_group,
                                                   Device device,
                                                   double timeout_s) {
    SR_CHECK(host_group != nullptr, "device_process_group: no host group");
    if (device.is_cpu())
        return host_group;
#if SHARDREC_WITH_CUDA
    return NcclProcessGroup::create(*host_group, device, timeout_s, host_group->name());
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
