// Fused embedding optimizers (FBGEMM TBE "optimizer in backward", TorchRec fused_params). The
// embedding backward aggregates duplicate ids per row (sort by row, then a segment sum) and
// updates each touched row once ("EXACT" in FBGEMM's names);
// rows no id touched, and their optimizer state, are left unchanged (FBGEMM's sparse Adam too).
// Plain header (no engine dependency): the float64 reference uses it too.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"

namespace shardrec::kernels {

// Update rules for one touched row r with aggregated gradient g (D floats), all in fp32:
//   weight_decay (L2, every type): g += weight_decay * w
//   kSgd:                w -= lr * g
//   kExactAdagrad:       state1 G [sum E, D]: G += g^2;           w -= lr * g / (sqrt(G) + eps)
//   kExactRowWiseAdagrad state1 G [sum E]:    G += mean_d(g_d^2); w -= lr * g / (sqrt(G) + eps)
//   kAdam:               state1 m, state2 v [sum E, D]: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//                        w -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
// Written once, for the CPU and CUDA updates, in kernels/optimizer_rules.h.
enum class OptimType { kSgd, kExactAdagrad, kExactRowWiseAdagrad, kAdam };

inline const char* optim_type_name(OptimType type) {
    switch (type) {
        case OptimType::kSgd:
            return "sgd";
        case OptimType::kExactAdagrad:
            return "exact_adagrad";
        case OptimType::kExactRowWiseAdagrad:
            return "exact_row_wise_adagrad";
        case OptimType::kAdam:
            return "adam";
    }
    return "?";
}

// How many state tensors the type needs (state1, then state2), each f32.
inline int optim_num_states(OptimType type) {
    switch (type) {
        case OptimType::kSgd:
            return 0;
        case OptimType::kExactAdagrad:
        case OptimType::kExactRowWiseAdagrad:
            return 1;
        case OptimType::kAdam:
            return 2;
    }
    return 0;
}

struct FusedOptimizerParams {
    OptimType type = OptimType::kSgd;
    float learning_rate = 0.01f;  // TorchRec's printed default
    float eps = 1e-8f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float weight_decay = 0.f;
    int64_t step =
        1;  // Adam bias correction: the 1-based count of updates, incremented by the caller
    // Where Adagrad's and row-wise Adagrad's sum of squares G (state1, FBGEMM's momentum1)
    // starts (torch.optim.Adagrad's and TorchRec's initial_accumulator_value); read only by
    // make_optimizer_states. Adam's moments start at 0.
    float initial_accumulator_value = 0.f;
};

// The state of `rows` rows of `cols` columns: row-wise Adagrad keeps one f32 per row, the
// others one (Adagrad) or two (Adam) f32 tensors shaped like the rows; undefined where unused.
// Adagrad's state1 starts at optim.initial_accumulator_value, every other state at 0.
void make_optimizer_states(const FusedOptimizerParams& optim,
                           int64_t rows,
                           int64_t cols,
                           Tensor& state1,
                           Tensor& state2,
                           Device device = Device::cpu());

}  // namespace shardrec::kernels
