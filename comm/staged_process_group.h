// StagedProcessGroup: the ProcessGroup of device tensors over a host group, through host copies.
// A collective copies its device input to host buffers, starts the host group's collective on
// them, and its Work's wait() copies the result back to the device. It is the device group of
// ranks that share a GPU, where NCCL cannot run (one communicator rank per device): the same
// numbers as NCCL, moved slower. Host tensors go to the host group as they are. Inputs must be
// complete when a collective starts (the caller synchronises the stream that wrote them); the
// output is written by wait() (or by an is_completed() that returns true). The host buffers are
// kept and taken again once no Work holds them, so steady steps allocate nothing after warm-up.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace shardrec::comm {

class StagedProcessGroup final : public ProcessGroup {
public:
    explicit StagedProcessGroup(std::shared_ptr<ProcessGroup> host);

    Work all_to_all_v(const Tensor& input,
                      const std::vector<int64_t>& input_splits,
                      Tensor& output,
                      const std::vector<int64_t>& output_splits) override;
    Work all_reduce(Tensor& tensor, ReduceOp op) override;
    Work reduce_scatter_v(const Tensor& input,
                          const std::vector<int64_t>& input_splits,
                          Tensor& output,
                          ReduceOp op) override;
    Work all_gather_v(const Tensor& input,
                      Tensor& output,
                      const std::vector<int64_t>& output_splits) override;
    Work broadcast(Tensor& tensor, int root) override;
    Work barrier() override;

    std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;

private:
    // A host tensor of `shape` in a kept buffer that no Work in flight holds (only this group
    // holds its storage), or in a new one.
    Tensor host_buffer(const Shape& shape, DType dtype);
    // A host copy of a device tensor (the tensor itself when it is on the host).
    Tensor on_host(const Tensor& t);
    // A host buffer for a device output (the output itself when it is on the host).
    Tensor host_out(const Tensor& t);

    std::shared_ptr<ProcessGroup> host_;
    std::mutex buffers_mutex_;
    std::vector<Tensor> buffers_;
};

}  // namespace shardrec::comm
