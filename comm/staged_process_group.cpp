#include "comm/staged_process_group.h"

#include <algorithm>
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

Work staged(Work host, const Tensor& host_out, const Tensor& out) {
    if (out.device().is_cpu())
        return host;
    return Work(std::make_unique<StagedWork>(std::move(host), host_out, out));
}

}  // namespace

StagedProcessGroup::StagedProcessGroup(std::shared_ptr<ProcessGroup> host)
    : ProcessGroup(host->rank(), host->size(), host->name()), host_(std::move(host)) {}

Tensor StagedProcessGroup::host_buffer(const Shape& shape, DType dtype) {
    const int64_t n = shape_numel(shape);
    std::lock_guard<std::mutex> lock(buffers_mutex_);
    for (const Tensor& b : buffers_) {
        if (b.dtype() == dtype && b.numel() >= n && !b.shares_storage())
            return b.slice(0, n).view(shape);
    }
    buffers_.push_back(Tensor::empty({std::max<int64_t>(n, 1)}, dtype));
    return buffers_.back().slice(0, n).view(shape);
}

Tensor StagedProcessGroup::on_host(const Tensor& t) {
    if (t.device().is_cpu())
        return t;
    Tensor h = host_buffer(t.shape(), t.dtype());
    h.copy_from(t);
    return h;
}

Tensor StagedProcessGroup::host_out(const Tensor& t) {
    return t.device().is_cpu() ? t : host_buffer(t.shape(), t.dtype());
}

Work StagedProcessGroup::all_to_all_v(const Tensor& input,
                                      const std::vector<int64_t>& input_splits,
                                      Tensor& output,
                                      const std::vector<int64_t>& output_splits) {
    Tensor out = host_out(output);
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
    Tensor out = host_out(output);
    Work w = host_->reduce_scatter_v(on_host(input), input_splits, out, op);
    return staged(std::move(w), out, output);
}

Work StagedProcessGroup::all_gather_v(const Tensor& input,
                                      Tensor& output,
                                      const std::vector<int64_t>& output_splits) {
    Tensor out = host_out(output);
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
