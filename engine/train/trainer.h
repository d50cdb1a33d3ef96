// The training loop behind `shardrec train`: builds the model and data from a resolved config,
// trains on the TrainPipelineBase schedule, evaluates on the held-out split, and writes
// metrics.jsonl into the run directory.
#pragma once

#include <string>

#include "engine/config/config.h"

namespace shardrec::train {

struct TrainSummary {
    int64_t steps = 0;
    int64_t samples = 0;
    double wall_s = 0;
    double last_eval_auc = 0;
    double last_eval_loss = 0;
};

TrainSummary run(const Config& config, const std::string& run_dir);

}  // namespace shardrec::train
