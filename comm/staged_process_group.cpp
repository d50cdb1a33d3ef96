#include "comm/staged_process_group.h"

#include <utility>

namespace shardrec::comm {
namespace {

// The host group's Work, then the host result copied into the device output.
class StagedWork final : public WorkImpl {
public:
    StagedWork(Work host, Tensor host_out, Tensor device_out)
        : host_(std::move(host)),
          host_out_(std::move(host_out)),
          device_out_(std::move(device_out)) {}

    void wait() override {
        host_.wait();
        if (!copied_) {
            device_out_.copy_from(host_out_);
            copied_ = true;
        }
    }

    bool is_completed() override {
        if (!host_.is_completed())
            return false;
        wait();
        return true;
    }

private:
    Work host_;
    Tensor host_out_, device_out_;
    bool copied_ = false;
};

// A host copy of a device tensor (the tensor itself when it is on the host).
Tensor on_host(const Tensor& t) {
    return t.device().is_cpu() ? t : t.to(Device::cpu());
}

// A host buffer for a device output (the output itself when it is on the host).
Tensor host_buffer(const Tensor& t) {
    return t.device().is_cpu() ? t : Tensor::empty(t.shape(), t.dtype());
}

Work staged(Work host, const Tensor& host_out, const Tensor& out) {
    if (out.device().is_cpu())
        return host;
    return Work(std::make_unique<StagedWork>(std::move(host), host_out, out));
}

}  // namespace

StagedProcessGroup::StagedProcessGroup(std::shared_ptr<ProcessGroup> host)
    : ProcessGroup(host->rank(), host->size(), host->name()), host_(std::move(host)) {}

Work StagedProcessGroup::all_to_all_v(const Tensor& input,
                                      const std::vector<int64_t>& input_splits,
                                      Tensor& output,
                                      const std::vector<int64_t>& output_splits) {
    Tensor out = host_buffer(output);
    Work w = host_->all_to_all_v(on_host(input), input_splits, out, output_splits);
    return staged(std::move(w), out, output);
}

Work StagedProcessGroup::all_reduce(Tensor& tensor, ReduceOp op) {
    Tensor t = on_host(tensor);
    Work w = host_->all_reduce(t, op);
    return staged(std::move(w), t, tensor);
}

Work StagedProcessGroup::reduce_scatter_v(const Tensor& input,
                                          const std::vector<int64_t>& input_splits,
                                          Tensor& output,
                                          ReduceOp op) {
    Tensor out = host_buffer(output);
    Work w = host_->reduce_scatter_v(on_host(input), input_splits, out, op);
    return staged(std::move(w), out, output);
}

Work StagedProcessGroup::all_gather_v(const Tensor& input,
                                      Tensor& output,
                                      const std::vector<int64_t>& output_splits) {
    Tensor out = host_buffer(output);
    Work w = host_->all_gather_v(on_host(input), out, output_splits);
    return staged(std::move(w), out, output);
}

Work StagedProcessGroup::broadcast(Tensor& tensor, int root) {
    Tensor t = on_host(tensor);
    Work w = host_->broadcast(t, root);
    return staged(std::move(w), t, tensor);
}

Work StagedProcessGroup::barrier() {
    return host_->barrier();
}

std::shared_ptr<ProcessGroup> StagedProcessGroup::split(int color,
                                                        int key,
                                                        const std::string& name) {
    std::shared_ptr<ProcessGroup> host = host_->split(color, key, name);
    return host != nullptr ? std::make_shared<StagedProcessGroup>(std::move(host)) : nullptr;
}

}  // namespace shardrec::comm
