// A test adapter: a device process group (NcclProcessGroup, StagedProcessGroup) seen through
// host tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace shardrec::test {

using comm::ReduceOp;
using comm::Work;

// Host tensors in, host tensors out, a device group in between (the waits are inside each call),
// so the host oracle cases of test/comm/collective_cases.h run unchanged on a device group.
class HostFacingGroup final : public comm::ProcessGroup {
public:
    HostFacingGroup(std::shared_ptr<comm::ProcessGroup> group, Device device)
        : ProcessGroup(group->rank(), group->size(), group->name()),
          group_(std::move(group)),
          device_(device) {}

    Work all_to_all_v(const Tensor& input,
                      const std::vector<int64_t>& input_splits,
                      Tensor& output,
                      const std::vector<int64_t>& output_splits) override {
        Tensor in = input.to(device_), out = output.to(device_);
        group_->all_to_all_v(in, input_splits, out, output_splits).wait();
        output.copy_from(out);
        return Work();
    }

    Work all_reduce(Tensor& tensor, ReduceOp op) override {
        Tensor t = tensor.to(device_);
        group_->all_reduce(t, op).wait();
        tensor.copy_from(t);
        return Work();
    }

    Work reduce_scatter_v(const Tensor& input,
                          const std::vector<int64_t>& input_splits,
                          Tensor& output,
                          ReduceOp op) override {
        Tensor in = input.to(device_), out = output.to(device_);
        group_->reduce_scatter_v(in, input_splits, out, op).wait();
        output.copy_from(out);
        return Work();
    }

    Work all_gather_v(const Tensor& input,
                      Tensor& output,
                      const std::vector<int64_t>& output_splits) override {
        Tensor in = input.to(device_), out = output.to(device_);
        group_->all_gather_v(in, out, output_splits).wait();
        output.copy_from(out);
        return Work();
    }

    Work broadcast(Tensor& tensor, int root) override {
        Tensor t = tensor.to(device_);
        group_->broadcast(t, root).wait();
        tensor.copy_from(t);
        return Work();
    }

    Work barrier() override {
        group_->barrier().wait();
        return Work();
    }

    std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
        return std::make_shared<HostFacingGroup>(group_->split(color, key, name), device_);
    }

private:
    std::shared_ptr<comm::ProcessGroup> group_;
    Device device_;
};

}  // namespace shardrec::test
