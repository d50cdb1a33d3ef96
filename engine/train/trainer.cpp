// The training loop: data, model, optimizers and metrics wired from the resolved config.
#include "engine/train/trainer.h"

#include <chrono>

#include "comm/mpi_env.h"
#include "engine/core/log.h"
#include "engine/data/synthetic.h"
#include "engine/optim/lr_schedule.h"
#include "engine/train/metrics.h"
#include "engine/train/progress.h"
#include "engine/train/run_dir.h"
#include "engine/train/train_pipeline_base.h"
#include "kernels/linear.h"

namespace shardrec::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One synthetic feature per (table, feature name), in the model's feature order.
data::SyntheticSpec synthetic_spec(const Config& config) {
    data::SyntheticSpec spec;
    spec.seed = static_cast<uint64_t>(config.train.seed);
    spec.num_dense = config.model.dense_in_features;
    spec.signal_scale *= config.data.synthetic.signal_scale;
    for (const auto& table : config.model.tables) {
        for (const auto& feature : table.feature_names) {
            data::SyntheticTable t;
            t.feature_name = feature;
            t.num_embeddings = table.num_embeddings;
            t.pooling_factor = table.pooling_factor;
            t.zipf_alpha = config.data.synthetic.zipf_alpha;
            t.weighted = table.weighted;
            spec.tables.push_back(t);
        }
    }
    return spec;
}

DenseOptimizerConfig dense_optimizer_config(const OptimizerConfig::Dense& d) {
    DenseOptimizerConfig c;
    c.type = d.type;
    c.learning_rate = static_cast<float>(d.learning_rate);
    c.eps = static_cast<float>(d.eps);
    c.beta1 = static_cast<float>(d.beta1);
    c.beta2 = static_cast<float>(d.beta2);
    c.weight_decay = static_cast<float>(d.weight_decay);
    c.initial_accumulator_value = static_cast<float>(d.initial_accumulator_value);
    return c;
}

LrScheduleConfig lr_schedule_config(const OptimizerConfig::Dense& d) {
    LrScheduleConfig s;
    s.base_lr = static_cast<float>(d.learning_rate);
    s.warmup_steps = d.warmup_steps;
    s.decay_start_step = d.decay_start_step;
    s.decay_steps = d.decay_steps;
    s.decay_power = static_cast<float>(d.decay_power);
    s.end_lr_factor = static_cast<float>(d.end_lr_factor);
    return s;
}

Metrics evaluate(TrainPipelineBase& pipeline,
                 const data::SyntheticDataset& dataset,
                 int64_t num_samples,
                 int64_t batch_size,
                 MetricsAccumulator& acc) {
    acc.reset();
    for (int64_t start = 0; start < num_samples; start += batch_size) {
        const int64_t n = std::min(batch_size, num_samples - start);
        const Batch batch = dataset.batch(start, n, data::Split::kEval);
        acc.add(pipeline.predict(batch), batch.labels);
    }
    return acc.compute();
}

}  // namespace

TrainSummary run(const Config& config, const std::string& run_dir) {
    const comm::ProcessInfo& proc = comm::process_info();
    SR_CHECK(proc.world_size == 1,
             "training on {} ranks needs model-parallel sharding, which this build does not have "
             "yet: run with one process (mpirun -np 1)",
             proc.world_size);
    SR_CHECK(config.data.type == "synthetic", "data.type '{}' is not supported", config.data.type);
    SR_CHECK(config.runtime.device == "cpu", "runtime.device '{}': this build trains on the CPU",
             config.runtime.device);
    if (config.runtime.threads > 0) {
        kernels::set_blas_num_threads(static_cast<int>(config.runtime.threads));
    }

    const data::SyntheticDataset dataset(synthetic_spec(config));
    const auto sparse_params = sparse_optimizer_params(config.optimizer.sparse);
    std::unique_ptr<RecModel> model =
        make_model(config.model, static_cast<uint64_t>(config.train.seed), sparse_params);
    std::unique_ptr<DenseOptimizer> optimizer =
        make_dense_optimizer(dense_optimizer_config(config.optimizer.dense));
    const LrScheduleConfig schedule = lr_schedule_config(config.optimizer.dense);
    TrainPipelineBase pipeline(*model, *optimizer);

    MetricsWriter writer(run_dir, proc.rank == 0);
    Progress progress(config.train.steps, config.train.log_every);
    MetricsAccumulator eval_acc;
    const int64_t B = config.data.batch_size;
    const int64_t global_batch = B * proc.world_size;
    const int64_t eval_samples = config.train.eval_samples;
    log::root().info("training {} ({} tables, {} dense parameters) for {} steps, batch {} per rank",
                     config.model.type, config.model.tables.size(), model->parameters().size(),
                     config.train.steps, B);

    TrainSummary summary;
    const auto t0 = Clock::now();
    auto window_t0 = t0;
    int64_t window_samples = 0;
    for (int64_t step = 0; step < config.train.steps; ++step) {
        const Batch batch =
            dataset.batch(step * global_batch + proc.rank * B, B, data::Split::kTrain);
        const float lr = lr_at(schedule, step);
        const float sparse_lr = static_cast<float>(config.optimizer.sparse.learning_rate) *
                                (schedule.base_lr > 0 ? lr / schedule.base_lr : 1.0f);
        const StepResult r = pipeline.progress(batch, lr, sparse_lr);
        SR_CHECK(std::isfinite(r.loss), "loss is {} at step {}", r.loss, step + 1);
        window_samples += global_batch;
        const int64_t done = step + 1;
        if (done % config.train.log_every == 0 || done == config.train.steps) {
            const double sps = static_cast<double>(window_samples) / seconds_since(window_t0);
            writer.train(done, r.loss, lr, sps);
            progress.update(done, r.loss, sps);
            window_t0 = Clock::now();
            window_samples = 0;
        }
        const bool last = done == config.train.steps;
        if (last || (config.train.eval_every > 0 && done % config.train.eval_every == 0)) {
            const Metrics m = evaluate(pipeline, dataset, eval_samples, B, eval_acc);
            writer.eval(done, m.loss, m.auc, m.ne, m.accuracy);
            progress.message(
                fmt::format("eval step {}: loss {:.5f} auc {:.5f} ne {:.5f} acc {:.4f}", done,
                            m.loss, m.auc, m.ne, m.accuracy));
            summary.last_eval_auc = m.auc;
            summary.last_eval_loss = m.loss;
        }
    }
    summary.steps = config.train.steps;
    summary.samples = config.train.steps * global_batch;
    summary.wall_s = seconds_since(t0);
    writer.done(summary.steps, summary.samples, summary.wall_s);
    progress.finish();
    return summary;
}

}  // namespace shardrec::train
