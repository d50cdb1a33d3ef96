// The fused embedding optimizers' state, allocated and initialised on the tables' device.
#include "kernels/embedding_optimizer.h"

#include "kernels/elementwise.h"

namespace shardrec::kernels {

void make_optimizer_states(const FusedOptimizerParams& optim,
                           int64_t rows,
                           int64_t cols,
                           Tensor& state1,
                           Tensor& state2,
                           Device device) {
    const bool adagrad =
        optim.type == OptimType::kExactAdagrad || optim.type == OptimType::kExactRowWiseAdagrad;
    if (optim.type == OptimType::kExactRowWiseAdagrad) {
        state1 = Tensor::empty({rows}, DType::kF32, device);
    } else if (optim_num_states(optim.type) >= 1) {
        state1 = Tensor::empty({rows, cols}, DType::kF32, device);
    }
    if (state1.defined()) {
        Stream stream(device);  // on the CPU a no-op stream
        fill_(state1, adagrad ? optim.initial_accumulator_value : 0.f, stream);
        stream.synchronize();
    }
    if (optim_num_states(optim.type) >= 2)
        state2 = Tensor::zeros({rows, cols}, DType::kF32, device);
}

}  // namespace shardrec::kernels
