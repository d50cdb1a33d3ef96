// The training loop behind `shardrec train`: a Trainer builds data, model and optimizers from a
// resolved config and steps them on the TrainPipelineBase schedule; run() adds evaluation on the
// held-out split, metrics.jsonl and progress. `shardrec bench` and the tests drive a Trainer too.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/process_group.h"
#include "engine/config/config.h"
#include "engine/data/batch_prefetcher.h"
#include "engine/data/dataset.h"
#include "engine/optim/lr_schedule.h"
#include "engine/train/batch_check.h"
#include "engine/train/managed_collision_tables.h"
#include "engine/train/metrics.h"
#include "engine/train/run_dir.h"
#include "engine/train/train_pipeline_base.h"
#include "engine/train/train_pipeline_sparse_dist.h"

namespace shardrec::train {

class Trainer {
public:
    // pg: the ranks that train together (dense layers replicated, tables sharded by the plan);
    // nullptr trains alone with unsharded tables. Rank r reads its slice of each global batch.
    Trainer(const Config& config, std::shared_ptr<comm::ProcessGroup> pg);

    // The per-rank slice of global batch `step` (0-based) of the train split.
    Batch train_batch(int64_t step) const;
    // Step `step` reads the train split from global sample `samples` on (a resume: the checkpoint
    // saved after `step` steps that had consumed `samples` samples); later steps follow at the
    // global batch size. The default (0, 0) reads global batch s at sample s x global batch.
    void set_data_position(int64_t step, int64_t samples);
    // Global samples consumed before step `step` (the data position a checkpoint records).
    int64_t samples_at(int64_t step) const;

    // The id of the run this trainer belongs to (run.yaml): its checkpoints carry it, and pruning
    // keeps to it. "" outside a run.
    void set_run_id(std::string run_id) { run_id_ = std::move(run_id); }

    const std::string& run_id() const { return run_id_; }

    // From now on train_batch produces the batches of the next `depth` steps on a background
    // thread (run() sets 2); 0, the default, produces each batch on the caller's thread.
    void set_prefetch_depth(int depth);
    // Seconds train_batch waited for its batches since the last call (the loader wait).
    double take_loader_wait_s();
    // Collective: each key_value table's cache counters since the start, summed over the ranks
    // (model order; empty without key_value tables).
    std::vector<std::pair<std::string, CacheStats>> cache_totals();
    // One step: input checks (BatchChecker), forward, loss, backward, fused sparse update, dense
    // step at the scheduled lr. A non-finite loss throws (nan_policy stop) or skips the batch on
    // every rank (skip_batch: StepResult::skipped).
    // This step runs on TrainPipelineBase whatever train.pipeline says (the same numbers).
    StepResult train_step(const Batch& batch, int64_t step);
    // The train inputs of steps [first_step, end_step): train_batch(step), then `prepare` (test
    // fault injection; may be empty), then the input checks, with the step's learning rates.
    std::unique_ptr<DataIterator> train_inputs(
        int64_t first_step,
        int64_t end_step,
        std::function<void(int64_t step, Batch& batch)> prepare = {});
    // Steps [0, steps) over `batches` (which the caller keeps alive) cycled, with the steps'
    // learning rates: benchmarks and tests measure the step, not the data loader. Managed-
    // collision tables remap each step's batch as training does (part of the step).
    std::unique_ptr<DataIterator> cycled_inputs(const std::vector<Batch>& batches, int64_t steps);
    // Trains the next step of `inputs` on train.pipeline (sparse_dist takes up to two steps ahead
    // from `inputs`); nullopt once both are exhausted. Checks the loss as train_step does.
    std::optional<TrainOutput> progress(DataIterator& inputs);

    // Steps taken from an iterator by the pipeline and not trained yet.
    int64_t num_queued() const { return sparse_dist_ ? sparse_dist_->num_queued() : 0; }

    // Whether queued steps have changed state already: a managed-collision remap runs when its
    // batch is taken. evaluate() and save_checkpoint() refuse to run until they are trained.
    bool ahead_of_model() const { return !mc_.empty() && num_queued() > 0; }

    // sparse_dist's per-stage times of the steps progress() trained since the last reset;
    // nullopt on the base pipeline (one stream, nothing overlapped).
    std::optional<StageTimes> stage_times() {
        return sparse_dist_ ? std::optional<StageTimes>(sparse_dist_->stage_times()) : std::nullopt;
    }

    void reset_stage_times() {
        if (sparse_dist_)
            sparse_dist_->reset_stage_times();
    }

    // Every metric over train.eval_samples samples of the eval split (rounded up to whole global
    // batches), the same on every rank. `samples`: every evaluated (logit, label) pair in eval
    // sample order, on every rank (one more gather per batch; `shardrec eval --predictions`).
    Metrics evaluate(MetricsAccumulator* samples = nullptr);
    // The same, asking `stop` before each batch (a collective agreement, called as often on every
    // rank): nothing once it says yes, so a stop signal need not wait for a long evaluation.
    std::optional<Metrics> evaluate_unless(const std::function<bool()>& stop);

    RecModel& model() { return *model_; }

    const Config& config() const { return config_; }

    // nullptr when training alone.
    const std::shared_ptr<comm::ProcessGroup>& process_group() const { return pg_; }

    DenseOptimizer& dense_optimizer() { return *optimizer_; }

    Device device() const { return device_; }

    // Waits for the device work queued so far (before reading parameters on the host).
    void synchronize() { pipeline_.stream().synchronize(); }

    float dense_lr(int64_t step) const;
    float sparse_lr(int64_t step) const;
    int64_t global_batch_size() const;

    const BatchChecker& batch_checker() const { return checker_; }

    // The managed-collision tables' remap (empty when the model has none).
    ManagedCollisionTables& managed_collision() { return mc_; }

private:
    std::optional<Metrics> evaluate_batches(MetricsAccumulator* samples,
                                            const std::function<bool()>* stop);
    // Rows [samples_at(step) + rank * B, + B) of the train split.
    Batch rank_slice(int64_t step) const;

    // The managed-collision remap of a train input's batch (the batch as it is without managed
    // tables); sets in.before_forward to reset the rows it evicts.
    Batch remap_ahead(const Batch& batch, TrainInput& in);

    // A skipped step is logged; a non-finite loss throws (nan_policy stop).
    StepResult finish_step(const StepResult& r, int64_t step);
    // Warns when the prefetch pipeline's fill thread has no CPU of its own on this rank.
    void warn_if_prefetch_shares_cpus() const;

    const Config config_;  // a copy: a trainer outlives the Config it was made from
    std::shared_ptr<comm::ProcessGroup> pg_;
    int rank_;
    int world_size_;
    Device device_;  // runtime.device: where the model trains
    // device_'s tensors over pg_'s ranks (NCCL, or MPI through staging copies where ranks share
    // a GPU): the output dists and the dense all-reduce. nullptr on the CPU or for one process.
    std::shared_ptr<comm::ProcessGroup> device_pg_;
    std::unique_ptr<data::Dataset> dataset_;  // data.type: make_dataset
    // The same batches as dataset_, sooner; mutable: train_batch is logically const.
    mutable std::unique_ptr<data::BatchPrefetcher> prefetcher_;
    int prefetch_depth_ = 0;
    mutable double loader_wait_s_ = 0;
    int64_t position_step_ = 0;  // set_data_position
    int64_t position_samples_ = 0;
    std::string run_id_;
    std::unique_ptr<RecModel> model_;
    std::unique_ptr<DenseOptimizer> optimizer_;
    LrScheduleConfig schedule_;
    TrainPipelineBase pipeline_;
    std::unique_ptr<TrainPipelineSparseDist> sparse_dist_;  // train.pipeline: sparse_dist
    MetricsAccumulator eval_acc_;
    BatchChecker checker_;
    ManagedCollisionTables mc_;
};

struct TrainSummary {
    int64_t steps = 0;
    int64_t samples = 0;
    double wall_s = 0;
    double last_eval_auc = 0;
    double last_eval_loss = 0;
    bool target_reached = false;  // train.target_auc ended the run at `steps`
    int64_t skipped_batches = 0;  // runtime.nan_policy skip_batch
};

// Trains in `run_dir` (open_run_dir: metrics.jsonl, checkpoints, the run id). resume: a
// checkpoint (or a directory of them) to continue from; empty starts at step 0.
TrainSummary run(const Config& config, const RunDir& run_dir, const std::string& resume = "");

// The world group when the process runs with several ranks, else nullptr (one process).
std::shared_ptr<comm::ProcessGroup> default_process_group();

// Sets the wait limit of an MPI group (and of the groups split from it later) to
// runtime.comm_timeout_s, or to SHARDREC_COMM_TIMEOUT_S when that is set. Returns pg.
std::shared_ptr<comm::ProcessGroup> with_comm_timeout(std::shared_ptr<comm::ProcessGroup> pg,
                                                      const Config& config);

// CPU threads per rank: runtime.threads; for 0, OMP_NUM_THREADS, else the CPUs of the rank's
// affinity mask, or, for a rank bound to no subset, the node's CPUs shared by its ranks. Applied
// to OpenMP and OpenBLAS.
int configure_threads(const Config& config);

}  // namespace shardrec::train
