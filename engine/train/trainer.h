// The training loop behind `shardrec train`: a Trainer builds data, model and optimizers from a
// resolved config and steps them on the TrainPipelineBase schedule; run() adds evaluation on the
// held-out split, metrics.jsonl and progress. `shardrec bench` and the tests drive a Trainer too.
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"
#include "engine/config/config.h"
#include "engine/data/batch_prefetcher.h"
#include "engine/data/dataset.h"
#include "engine/optim/lr_schedule.h"
#include "engine/train/metrics.h"
#include "engine/train/train_pipeline_base.h"

namespace shardrec::train {

class Trainer {
public:
    // pg: the ranks that train together (dense layers replicated, tables sharded by the plan);
    // nullptr trains alone with unsharded tables. Rank r reads its slice of each global batch.
    Trainer(const Config& config, std::shared_ptr<comm::ProcessGroup> pg);

    // The per-rank slice of global batch `step` (0-based) of the train split.
    Batch train_batch(int64_t step) const;
    // From now on train_batch produces the batches of the next `depth` steps on a background
    // thread (run() sets 2); 0, the default, produces each batch on the caller's thread.
    void set_prefetch_depth(int depth);
    // Seconds train_batch waited for its batches since the last call (the loader wait).
    double take_loader_wait_s();
    // One step: forward, loss, backward, fused sparse update, dense step at the scheduled lr.
    StepResult train_step(const Batch& batch, int64_t step);
    // Loss, AUC, NE and accuracy over train.eval_samples samples of the eval split.
    Metrics evaluate();

    RecModel& model() { return *model_; }

    const Config& config() const { return config_; }

    // nullptr when training alone.
    const std::shared_ptr<comm::ProcessGroup>& process_group() const { return pg_; }

    DenseOptimizer& dense_optimizer() { return *optimizer_; }

    float dense_lr(int64_t step) const;
    float sparse_lr(int64_t step) const;
    int64_t global_batch_size() const;

private:
    // Rows [step * global_B + rank * B, + B) of the train split.
    Batch rank_slice(int64_t step) const;

    const Config& config_;
    std::shared_ptr<comm::ProcessGroup> pg_;
    int rank_;
    int world_size_;
    std::unique_ptr<data::Dataset> dataset_;  // data.type: make_dataset
    // The same batches as dataset_, sooner; mutable: train_batch is logically const.
    mutable std::unique_ptr<data::BatchPrefetcher> prefetcher_;
    mutable double loader_wait_s_ = 0;
    std::unique_ptr<RecModel> model_;
    std::unique_ptr<DenseOptimizer> optimizer_;
    LrScheduleConfig schedule_;
    TrainPipelineBase pipeline_;
    MetricsAccumulator eval_acc_;
};

struct TrainSummary {
    int64_t steps = 0;
    int64_t samples = 0;
    double wall_s = 0;
    double last_eval_auc = 0;
    double last_eval_loss = 0;
};

TrainSummary run(const Config& config, const std::string& run_dir);

// The world group when the process runs with several ranks, else nullptr (one process).
std::shared_ptr<comm::ProcessGroup> default_process_group();

// CPU threads per rank: runtime.threads, or the cores shared evenly by the node's ranks. Applied
// to OpenMP and OpenBLAS.
int configure_threads(const Config& config);

}  // namespace shardrec::train
