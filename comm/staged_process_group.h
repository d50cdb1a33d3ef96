// StagedProcessGroup: the ProcessGroup of device tensors over a host group, through host copies.
// A collective copies its device input to host buffers, starts the host group's collective on
// them, and its Work's wait() copies the result back to the device. It is the device group of
// ranks that share a GPU, where NCCL cannot run (one communicator rank per device): the same
// numbers as NCCL, moved slower. Host tensors go to the host group as they are. Inputs must be
// complete when a collective starts (the caller synchronises the stream that wrote them); the
// output is written by wait() (or by an is_completed() that returns true).
#pragma once

#include <memory>
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
    std::shared_ptr<ProcessGroup> host_;
};

}  // namespace shardrec::comm
