// What every dist_data module shares (TorchRec comm_ops): the asynchronous result of a collective
// plus the host step that finishes it (TensorAwaitable), and the process-wide gradient-division
// switch. TorchRec divides the gradient of every embedding collective (pooled and sequence
// all-to-all, reduce-scatter, all-gather) by the group size when gradient division is on, so the
// embedding update matches DDP's mean over ranks for the dense part.
#pragma once

#include <functional>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec {

// TorchRec set_gradient_division / get_gradient_division. On by default. Read when a backward
// starts, so flip it between steps, never while a backward is in flight.
void set_gradient_division(bool on);
bool gradient_division();

// Collectives in flight and the host step that turns their buffers into the result (TorchRec
// Awaitable / Request). wait() completes every Work, then runs the finishing step once; later
// calls return the same Tensor. Destroying an awaitable that was never waited for waits for its
// collectives (Work's destructor) and skips the finishing step. Move-only.
class TensorAwaitable {
public:
    TensorAwaitable() = default;  // ready, undefined result

    explicit TensorAwaitable(Tensor ready) : result_(std::move(ready)), done_(true) {}

    TensorAwaitable(std::vector<comm::Work> works, std::function<Tensor()> finish)
        : finish_(std::move(finish)), works_(std::move(works)) {}

    TensorAwaitable(TensorAwaitable&&) noexcept = default;
    TensorAwaitable& operator=(TensorAwaitable&& other) noexcept;
    TensorAwaitable(const TensorAwaitable&) = delete;
    TensorAwaitable& operator=(const TensorAwaitable&) = delete;
    ~TensorAwaitable() = default;

    Tensor wait();

private:
    // finish_ owns the buffers the collectives read and write, so works_ is declared last:
    // members are destroyed in reverse order, and the Works must complete first.
    std::function<Tensor()> finish_;
    Tensor result_;
    bool done_ = false;
    std::vector<comm::Work> works_;
};

// A [rows, cols] view of the first rows * cols elements of buf on `device`, which grows (never
// shrinks) when it is too small: the modules' cached buffers, so a step of a seen size allocates
// nothing.
Tensor reuse_buffer(
    Tensor& buf, int64_t rows, int64_t cols, DType dtype, Device device = Device::cpu());

// t *= 1 / world element-wise (f32, in `stream`'s order on a device): TorchRec's gradient
// division (grad.div_(world_size)), for the backward of the collectives and the data_parallel
// paths' gathered gradients.
void divide_by_world(Tensor& t, int64_t world, Stream& stream = Stream::cpu());

}  // namespace shardrec
