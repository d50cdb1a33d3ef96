// The dense learning-rate schedule of MLPerf DLRM (torchrec_dlrm's LRPolicyScheduler): linear
// warmup from 0, constant, then polynomial decay to end_lr_factor * base_lr over decay_steps,
// constant after that.
#pragma once

#include <cstdint>

namespace shardrec {

struct LrScheduleConfig {
    float base_lr = 0.01f;
    int64_t warmup_steps = 0;
    int64_t decay_start_step = 0;
    int64_t decay_steps = 0;  // 0: no decay
    float decay_power = 2.0f;
    float end_lr_factor = 0.0f;
};

// The learning rate of 0-based step `step` (the update about to run):
//   step < warmup_steps:                      base * step / warmup_steps
//   decay_steps > 0, step >= decay_start_step: end + (base - end) * (1 - t / decay_steps)^power,
//                                             t = min(step - decay_start_step, decay_steps),
//                                             end = end_lr_factor * base
//   otherwise:                                base
// Throws on negative counts, a non-positive power or end_lr_factor outside [0, 1].
float lr_at(const LrScheduleConfig& config, int64_t step);

}  // namespace shardrec
