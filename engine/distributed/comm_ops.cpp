#include "engine/distributed/comm_ops.h"

#include <atomic>

#include "kernels/elementwise.h"

namespace shardrec {
namespace {

std::atomic<bool> g_gradient_division{true};

}  // namespace

void set_gradient_division(bool on) {
    g_gradient_division.store(on);
}

bool gradient_division() {
    return g_gradient_division.load();
}

TensorAwaitable& TensorAwaitable::operator=(TensorAwaitable&& other) noexcept {
    if (this != &other) {
        works_.clear();  // completes my collectives before finish_ drops their buffers
        finish_ = std::move(other.finish_);
        result_ = std::move(other.result_);
        done_ = other.done_;
        works_ = std::move(other.works_);
    }
    return *this;
}

Tensor TensorAwaitable::wait() {
    if (done_) {
        return result_;
    }
    for (comm::Work& work : works_) {
        work.wait();
    }
    works_.clear();
    if (finish_) {
        result_ = finish_();
        finish_ = nullptr;
    }
    done_ = true;
    return result_;
}

Tensor reuse_buffer(Tensor& buf, int64_t rows, int64_t cols, DType dtype, Device device) {
    SR_CHECK(rows >= 0 && cols >= 0, "reuse_buffer: negative shape [{}, {}]", rows, cols);
    const int64_t need = rows * cols;
    if (!buf.defined() || buf.dtype() != dtype || buf.numel() < need || buf.device() != device) {
        buf = Tensor::empty({need}, dtype, device);
    }
    return buf.view({buf.numel()}).slice(0, need).view({rows, cols});
}

void divide_by_world(Tensor& t, int64_t world, Stream& stream) {
    SR_CHECK(world >= 1, "divide_by_world: world size {}", world);
    const int64_t cols = t.dim() == 2 ? t.size(1) : 1;
    Tensor m = t.view({cols > 0 ? t.numel() / cols : 0, cols});
    kernels::columns_axpy(m, 0, m, 0, cols, static_cast<float>(world), nullptr,
                          kernels::ColumnsScale::kDivide, /*accumulate=*/false, stream);
}

}  // namespace shardrec
