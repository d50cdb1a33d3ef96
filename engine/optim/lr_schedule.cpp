#include "engine/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"

namespace shardrec {

float lr_at(const LrScheduleConfig& c, int64_t step) {
    SR_CHECK(step >= 0 && c.warmup_steps >= 0 && c.decay_start_step >= 0 && c.decay_steps >= 0,
             "lr schedule: negative step count (step {}, warmup {}, decay start {}, decay {})",
             step, c.warmup_steps, c.decay_start_step, c.decay_steps);
    SR_CHECK(c.decay_power > 0.f && c.end_lr_factor >= 0.f && c.end_lr_factor <= 1.f,
             "lr schedule: decay_power must be > 0 and end_lr_factor in [0, 1], got {} and {}",
             c.decay_power, c.end_lr_factor);
    const double base = c.base_lr;
    if (step < c.warmup_steps) {
        return static_cast<float>(base * static_cast<double>(step) /
                                  static_cast<double>(c.warmup_steps));
    }
    if (c.decay_steps > 0 && step >= c.decay_start_step) {
        const int64_t t = std::min(step - c.decay_start_step, c.decay_steps);
        const double left =
            static_cast<double>(c.decay_steps - t) / static_cast<double>(c.decay_steps);
        const double end = c.end_lr_factor * base;
        return static_cast<float>(end + (base - end) * std::pow(left, c.decay_power));
    }
    return c.base_lr;
}

}  // namespace shardrec
