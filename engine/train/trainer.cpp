// The training loop: data, model, optimizers and metrics wired from the resolved config.
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <utility>

#include "comm/mpi_env.h"
#include "comm/mpi_process_group.h"
#include "comm/nccl_process_group.h"
#include "comm/process_group.h"
#include "comm/stop_signal.h"
#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/core/log.h"
#include "engine/data/make_dataset.h"
#include "engine/distributed/memory_check.h"
#include "engine/distributed/planner.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/distributed/topology.h"
#include "engine/train/checkpoint.h"
#include "engine/train/fault_inject.h"
#include "engine/train/progress.h"
#include "engine/train/run_dir.h"
#include "engine/train/sample_cache_statistics.h"
#include "kernels/embedding_bag.h"
#include "kernels/linear.h"
#include "kernels/qcomm_codec.h"
#include "kernels/threads.h"

namespace shardrec::train {
namespace {

using Clock = std::chrono::steady_clock;

// Batches produced ahead of the step that trains, each on a thread of its own. On a GPU the
// host's threads have nothing else to do, so as many batches as threads are in production.
constexpr int kPrefetchDepth = 2;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
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

// runtime.device: cpu, cuda (the node-local rank's GPU: one rank per GPU) or cuda:N. Makes it
// the current device of this rank, runtime.gemm_math the math of its GEMMs and
// runtime.hot_row_update the CUDA backward's hot-row kernel.
Device resolve_device(const Config& config) {
    const std::string& name = config.runtime.device;
    kernels::set_gemm_math(kernels::gemm_math_from_name(config.runtime.gemm_math));
    kernels::set_hot_row_update(kernels::hot_row_update_from_name(config.runtime.hot_row_update));
    if (name == "cpu")
        return Device::cpu();
    const comm::ProcessInfo& info = comm::process_info();
    const int count = cuda::device_count();
    SR_CHECK(count > 0,
             "runtime.device {}: rank {} on {} sees no CUDA device (or shardrec was built with "
             "SHARDREC_CUDA=OFF)",
             name, info.rank, info.host);
    const Device device =
        name == "cuda" ? Device::cuda(info.local_rank % count) : Device::parse(name);
    SR_CHECK(device.index < count, "runtime.device {}: rank {} on {} sees {} CUDA device(s)", name,
             info.rank, info.host, count);
    cuda::set_device(device.index);
    return device;
}

// The device, once the plan is known to fit its memory: checked before anything large is
// allocated, with a barrier so that no rank's check sees a node-mate's tables already allocated.
Device resolve_device_with_room(const Config& config,
                                const std::shared_ptr<comm::ProcessGroup>& pg) {
    const Device device = resolve_device(config);
    check_memory_fits(config, pg ? pg->size() : 1, comm::process_info().local_size,
                      pg ? pg->rank() : 0, device);
    if (pg)
        pg->barrier().wait();
    return device;
}

// One process: the plain EmbeddingBagCollection. Several ranks: the tables sharded by the plan
// (sharding section, plan file or auto planner), dense layers replicated.
std::unique_ptr<EmbeddingBagCollectionInterface> make_sparse_arch(
    const Config& config,
    const data::Dataset& dataset,
    const std::shared_ptr<comm::ProcessGroup>& pg,
    Device device,
    const std::shared_ptr<comm::ProcessGroup>& device_pg) {
    const auto optimizer = sparse_optimizer_params(config.optimizer.sparse);
    const auto seed = static_cast<uint64_t>(config.train.seed);
    // A kernel only the sharded collection has, or a plan file (its kernels, checked against
    // this world size), takes one process through the sharded collection too.
    bool planned = !config.sharding.plan_file.empty();
    for (const ModelConfig::Table& t : config.model.tables) {
        const std::string kernel = config.sharding.kernel_of(t.name);
        planned = planned || kernel == "key_value" || kernel == "fused_uvm" ||
                  kernel == "fused_uvm_caching";
    }
    if (pg == nullptr && !planned) {
        note_unchecked_rank_lists(config.sharding);
        return make_embedding_bag_collection(config.model, seed, optimizer, device);
    }
    std::shared_ptr<comm::ProcessGroup> group = pg ? pg : comm::world_process_group();
    // 2D parallelism (sharding.replica_groups R): the tables are sharded over a group of
    // G = W / R consecutive ranks and every group holds the same sharding. TorchRec's
    // DMPCollection strides its sharding groups across nodes (its replicas sync whole shards
    // inside a node); here a group is consecutive ranks (a node, whole nodes, or a part of one):
    // the input and output dists, on the critical path of every forward and backward, stay on
    // a node's fast links, the replicas only exchange the touched rows' gradients (the peer group
    // across the groups), and a group's ranks are the planner's topology as they are.
    std::shared_ptr<comm::ProcessGroup> replicas;
    const int G =
        sharding_group_size(config.sharding, group->size(), comm::process_info().local_size);
    if (G < group->size()) {
        SR_CHECK(device.is_cpu(),
                 "sharding.replica_groups {}: 2D parallelism runs on the CPU only for now, not "
                 "on runtime.device {}",
                 config.sharding.replica_groups, config.runtime.device);
        const int rank = group->rank();
        replicas = group->split(rank % G, rank, "replica_group");
        group = group->split(rank / G, rank, "sharding_group");
    }
    Topology topology =
        resolve_topology(config.sharding.topology, config.runtime.device, group->size());
    const int placed = std::min(comm::process_info().local_size, group->size());
    if (!config.sharding.topology.empty()) {
        const std::string computes = device.is_cpu() ? "cpu" : "cuda";
        SR_CHECK(topology.compute_device == computes,
                 "sharding.topology '{}' describes {} ranks, but this run computes on {} "
                 "(runtime.device {}): the planner would cost another machine; give a {} "
                 "topology (configs/topologies/)",
                 config.sharding.topology, topology.compute_device, computes, config.runtime.device,
                 computes);
        if (topology.local_size != placed)
            log::root().warn(
                "sharding.topology '{}' has local_size {}, but MPI placed {} of these ranks on a "
                "node: the plan takes MPI's {} (`shardrec plan` takes the file's)",
                config.sharding.topology, topology.local_size, placed, placed);
    }
    topology.local_size = placed;
    // The auto planner costs the caches' misses from the data's own ids (the same samples on
    // every rank of a group: the same plan).
    const CacheStatistics stats =
        config.sharding.planner == "auto" && config.sharding.plan_file.empty()
            ? sample_cache_statistics(config, group->size(), &dataset)
            : CacheStatistics{};
    const ShardingPlan plan = make_sharding_plan(config, topology, &stats);
    log::root().info("sharding plan for {} ranks{}:\n{}", group->size(),
                     replicas ? fmt::format(", replicated in {} groups", replicas->size()) : "",
                     plan_table(plan, config.model.tables, PlanTableOptions{}));
    const QCommsConfig qcomms{kernels::comm_type_from_name(config.comm.qcomms.forward),
                              kernels::comm_type_from_name(config.comm.qcomms.backward)};
    return std::make_unique<ShardedEmbeddingBagCollection>(
        embedding_bag_configs(config.model), is_weighted(config.model), plan, group, seed,
        optimizer, device, device_pg, qcomms, config.sharding.storage.path, replicas,
        hierarchical_mode_from_name(config.comm.hierarchical));
}

// The plan of a sharded collection (it places the managed-collision buckets); null for one
// process's collection.
const ShardingPlan* sharding_plan_of(EmbeddingBagCollectionInterface& sparse) {
    const auto* sharded = dynamic_cast<const ShardedEmbeddingBagCollection*>(&sparse);
    return sharded != nullptr ? &sharded->plan() : nullptr;
}

// device's tensors over pg's ranks: NCCL when every rank has a GPU of its own, else MPI through
// staging copies; nullptr for the CPU or one process. Collective over pg.
std::shared_ptr<comm::ProcessGroup> make_device_process_group(
    const std::shared_ptr<comm::ProcessGroup>& pg, Device device, const Config& config) {
    if (pg == nullptr || device.is_cpu())
        return nullptr;
    return comm::device_process_group(pg, device,
                                      comm::comm_timeout_s_from_env(config.runtime.comm_timeout_s));
}

// The model with its dense layers on `device`.
std::unique_ptr<RecModel> make_trainer_model(const Config& config,
                                             const data::Dataset& dataset,
                                             const std::shared_ptr<comm::ProcessGroup>& pg,
                                             Device device,
                                             const std::shared_ptr<comm::ProcessGroup>& device_pg) {
    std::unique_ptr<RecModel> model =
        make_model(config.model, static_cast<uint64_t>(config.train.seed),
                   make_sparse_arch(config, dataset, pg, device, device_pg));
    model->move_dense_to(device);
    return model;
}

}  // namespace

int configure_threads(const Config& config) {
    int threads = static_cast<int>(config.runtime.threads);
    if (threads <= 0) {
        // What the launcher gave this rank: OMP_NUM_THREADS, else the CPUs of its affinity mask
        // (srun --cpus-per-task, mpirun --bind-to, taskset). An unbound rank may run anywhere on
        // the node, which it shares with the node's other ranks: their share of it.
        const char* omp = std::getenv("OMP_NUM_THREADS");
        const int from_env = omp != nullptr ? std::atoi(omp) : 0;
        const int usable = static_cast<int>(usable_cpus());
        const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        threads = from_env > 0   ? from_env
                  : usable < all ? usable
                                 : std::max(1, all / std::max(1, comm::process_info().local_size));
        // runtime.threads above the mask is refused (config.cpp); the environment's is taken,
        // but said: its threads take turns on the CPUs, slow as soon as one is busy.
        if (from_env > usable)
            log::all().warn(
                "OMP_NUM_THREADS={} exceeds the {} CPU(s) this process may run on "
                "(sched_getaffinity): its threads share them, which is slow when any is busy; set "
                "OMP_NUM_THREADS or runtime.threads to at most {}",
                from_env, usable, usable);
    }
    kernels::set_cpu_threads(threads);
    if (threads > 1 && std::string(kernels::blas_threading()) != "OpenMP") {
        log::root().warn(
            "OpenBLAS is its {} build: its GEMMs run on threads of their own that compete with the "
            "OpenMP threads of the other kernels for the cores; build against OpenBLAS's OpenMP "
            "build (libopenblas-openmp-dev, scripts/setup.sh)",
            kernels::blas_threading());
    }
    return threads;
}

std::shared_ptr<comm::ProcessGroup> default_process_group() {
    return comm::process_info().world_size > 1 ? comm::world_process_group() : nullptr;
}

std::shared_ptr<comm::ProcessGroup> with_comm_timeout(std::shared_ptr<comm::ProcessGroup> pg,
                                                      const Config& config) {
    if (auto* mpi = dynamic_cast<comm::MpiProcessGroup*>(pg.get())) {
        mpi->set_timeout_s(comm::comm_timeout_s_from_env(config.runtime.comm_timeout_s));
    }
    return pg;
}

// The timeout is set before the sparse arch splits its sub-groups from pg (they inherit it).
Trainer::Trainer(const Config& config, std::shared_ptr<comm::ProcessGroup> pg)
    : config_(config),
      pg_(with_comm_timeout(std::move(pg), config_)),
      rank_(pg_ ? pg_->rank() : 0),
      world_size_(pg_ ? pg_->size() : 1),
      device_(resolve_device_with_room(config_, pg_)),
      device_pg_(make_device_process_group(pg_, device_, config_)),
      dataset_(data::make_dataset(config_)),
      prefetcher_(std::make_unique<data::BatchPrefetcher>(
          [this](int64_t step) { return rank_slice(step); }, 0)),
      model_(make_trainer_model(config_, *dataset_, pg_, device_, device_pg_)),
      optimizer_(make_dense_optimizer(dense_optimizer_config(config_.optimizer.dense))),
      schedule_(lr_schedule_config(config_.optimizer.dense)),
      pipeline_(*model_, *optimizer_, pg_, device_, device_pg_),
      checker_(config_.model,
               parse_bounds_check_mode(config_.runtime.bounds_check),
               parse_nan_policy(config_.runtime.nan_policy)),
      mc_(config_.model,
          static_cast<uint64_t>(config_.train.seed),
          pg_,
          sharding_plan_of(model_->sparse_arch())) {
    // An evaluation reads whole global batches (evaluate): they must fit in a finite eval split,
    // or its first rows would be read twice and weigh twice in AUC and loss.
    const int64_t eval_rows = dataset_->num_samples(data::Split::kEval);
    const int64_t global = global_batch_size();
    const int64_t eval_read = (config_.train.eval_samples + global - 1) / global * global;
    // An error, not a clamp: evaluating repeated rows would weight them twice in AUC and loss.
    const int64_t fits = eval_rows / global * global;
    SR_CHECK(
        eval_rows < 0 || eval_read <= eval_rows,
        "train.eval_samples {} is read in whole global batches of {} ({} rank(s) x "
        "data.batch_size {}), {} rows, but the eval split of {} has only {}: {}",
        config_.train.eval_samples, global, world_size_, config_.data.batch_size, eval_read,
        config_.data.type == "criteo_binary" ? config_.data.criteo_binary.path : config_.data.type,
        eval_rows,
        fits > 0 ? fmt::format("set train.eval_samples <= {}", fits)
                 : std::string("not one global batch; lower data.batch_size, enlarge the "
                               "eval split (data.criteo_binary.eval_days, eval_fraction) "
                               "or set train.eval_samples: 0"));
    pipeline_.set_skip_non_finite(parse_nan_policy(config_.runtime.nan_policy) ==
                                  NanPolicy::kSkipBatch);
    pipeline_.set_allreduce_precision(
        kernels::comm_type_from_name(config_.comm.allreduce_precision));
    if (config_.train.pipeline != "base") {
        sparse_dist_ = std::make_unique<TrainPipelineSparseDist>(
            pipeline_, *model_, config_.train.pipeline == "prefetch_sparse_dist");
        warn_if_prefetch_shares_cpus();
    }
}

// The prefetch pipeline's fills run on a thread beside the compute; on a CPU rank whose CPUs are
// all taken by its compute threads (mpirun binds a rank to one core by default) they take turns
// with the compute instead of hiding behind it.
void Trainer::warn_if_prefetch_shares_cpus() const {
    const auto* sharded =
        dynamic_cast<const ShardedEmbeddingBagCollection*>(&model_->sparse_arch());
    if (config_.train.pipeline != "prefetch_sparse_dist" || !device_.is_cpu() ||
        sharded == nullptr || !sharded->has_cached_shards())
        return;
    const int64_t cpus = usable_cpus(), threads = kernels::cpu_threads();
    if (cpus > threads)
        return;
    log::all().warn(
        "train.pipeline prefetch_sparse_dist fills the key_value caches on a thread beside the "
        "compute, and rank {} may run on {} CPU{} for its {} compute thread{}: the fills take "
        "turns with the compute instead of hiding behind it. Give each rank a CPU more "
        "(mpirun --bind-to none or --map-by slot:PE=N, SLURM --cpus-per-task){}",
        rank_, cpus, cpus == 1 ? "" : "s", threads, threads == 1 ? "" : "s",
        cpus > 1 ? fmt::format(" or set runtime.threads to {}", cpus - 1) : "");
}

int64_t Trainer::global_batch_size() const {
    return config_.data.batch_size * world_size_;
}

int64_t Trainer::samples_at(int64_t step) const {
    return position_samples_ + (step - position_step_) * global_batch_size();
}

void Trainer::set_data_position(int64_t step, int64_t samples) {
    SR_CHECK(step >= 0 && samples >= 0, "data position: step {} and samples {} must be >= 0", step,
             samples);
    position_step_ = step;
    position_samples_ = samples;
    set_prefetch_depth(prefetch_depth_);  // batches produced ahead were read at the old position
}

Batch Trainer::rank_slice(int64_t step) const {
    const int64_t B = config_.data.batch_size;
    return dataset_->batch(samples_at(step) + rank_ * B, B, data::Split::kTrain);
}

Batch Trainer::train_batch(int64_t step) const {
    double wait_s = 0;
    Batch batch = prefetcher_->get(step, &wait_s);
    loader_wait_s_ += wait_s;
    return batch;
}

void Trainer::set_prefetch_depth(int depth) {
    prefetch_depth_ = depth;
    prefetcher_ = std::make_unique<data::BatchPrefetcher>(
        [this](int64_t step) { return rank_slice(step); }, depth);
}

std::vector<std::pair<std::string, CacheStats>> Trainer::cache_totals() {
    auto* sharded = dynamic_cast<ShardedEmbeddingBagCollection*>(&model_->sparse_arch());
    if (sharded == nullptr)
        return {};
    std::vector<std::pair<std::string, CacheStats>> out;
    for (const ModelConfig::Table& t : config_.model.tables) {
        if (is_cached_kernel(sharded->plan().at(t.name).compute_kernel))
            out.emplace_back(t.name, CacheStats{});
    }
    if (out.empty())
        return out;
    constexpr int64_t kCounters = 6;
    Tensor sums = Tensor::zeros({static_cast<int64_t>(out.size()) * kCounters}, DType::kI64);
    int64_t* v = sums.data<int64_t>();
    for (const auto& [shard, st] : sharded->cache_stats()) {
        const std::string table = shard.substr(0, shard.rfind('@'));
        for (size_t i = 0; i < out.size(); ++i) {
            if (out[i].first != table)
                continue;
            int64_t* c = v + static_cast<int64_t>(i) * kCounters;
            c[0] += st.lookups;
            c[1] += st.unique_rows;
            c[2] += st.misses;
            c[3] += st.overflow;
            c[4] += st.bytes_in;
            c[5] += st.bytes_out;
        }
    }
    if (pg_ != nullptr)
        pg_->all_reduce(sums, comm::ReduceOp::kSum).wait();
    for (size_t i = 0; i < out.size(); ++i) {
        const int64_t* c = v + static_cast<int64_t>(i) * kCounters;
        out[i].second = CacheStats{c[0], c[1], c[2], c[3], c[4], c[5]};
    }
    return out;
}

double Trainer::take_loader_wait_s() {
    return std::exchange(loader_wait_s_, 0.0);
}

float Trainer::dense_lr(int64_t step) const {
    return lr_at(schedule_, step);
}

// The sparse learning rate follows the dense schedule's warmup and decay factor.
float Trainer::sparse_lr(int64_t step) const {
    const float factor = schedule_.base_lr > 0 ? dense_lr(step) / schedule_.base_lr : 1.0f;
    return static_cast<float>(config_.optimizer.sparse.learning_rate) * factor;
}

StepResult Trainer::train_step(const Batch& batch, int64_t step) {
    bool finite = true;
    const Batch remapped =
        mc_.empty() ? batch : mc_.remap_train(batch, model_->sparse_arch(), pipeline_.stream());
    const Batch& checked = checker_.check(remapped, BatchOrigin{"train", step + 1, rank_}, finite);
    return finish_step(pipeline_.progress(checked, dense_lr(step), sparse_lr(step), finite), step);
}

namespace {

// Calls fn for each next().
class FunctionIterator final : public DataIterator {
public:
    explicit FunctionIterator(std::function<std::optional<TrainInput>()> fn) : fn_(std::move(fn)) {}

    std::optional<TrainInput> next() override { return fn_(); }

private:
    std::function<std::optional<TrainInput>()> fn_;
};

// Yields nothing: the pipeline trains the steps it holds.
class NoInputs final : public DataIterator {
public:
    std::optional<TrainInput> next() override { return std::nullopt; }
};

}  // namespace

std::unique_ptr<DataIterator> Trainer::train_inputs(int64_t first_step,
                                                    int64_t end_step,
                                                    std::function<void(int64_t, Batch&)> prepare) {
    return std::make_unique<FunctionIterator>([this, step = first_step, end_step,
                                               prepare = std::move(prepare)]() mutable
                                              -> std::optional<TrainInput> {
        if (step >= end_step)
            return std::nullopt;
        TrainInput in;
        in.step = step++;
        Batch batch = train_batch(in.step);
        if (prepare)
            prepare(in.step, batch);
        batch = remap_ahead(batch, in);
        // A handle copy: the checker's fixed batch is made anew for each batch it fixes.
        in.batch = checker_.check(batch, BatchOrigin{"train", in.step + 1, rank_}, in.input_finite);
        in.dense_lr = dense_lr(in.step);
        in.sparse_lr = sparse_lr(in.step);
        return in;
    });
}

std::unique_ptr<DataIterator> Trainer::cycled_inputs(const std::vector<Batch>& batches,
                                                     int64_t steps) {
    SR_CHECK(!batches.empty(), "cycled_inputs: no batches");
    return std::make_unique<FunctionIterator>(
        [this, &batches, steps, step = int64_t{0}]() mutable -> std::optional<TrainInput> {
            if (step >= steps)
                return std::nullopt;
            const int64_t s = step++;
            TrainInput in{s, {}, true, dense_lr(s), sparse_lr(s), {}};
            in.batch = remap_ahead(batches[static_cast<size_t>(s) % batches.size()], in);
            return in;
        });
}

// A pipeline may take a batch while the one before still trains: the remap runs now, and the
// rows it evicts are reset by the input's before_forward, once the steps before have updated
// them.
Batch Trainer::remap_ahead(const Batch& batch, TrainInput& in) {
    if (mc_.empty())
        return batch;
    ManagedCollisionEvictions evicted;
    Batch out = mc_.remap_train(batch, &evicted);
    if (!evicted.empty()) {
        in.before_forward = [this, evicted = std::move(evicted)](Stream& stream) {
            mc_.reset_evicted(evicted, model_->sparse_arch(), stream);
        };
    }
    return out;
}

std::optional<TrainOutput> Trainer::progress(DataIterator& inputs) {
    std::optional<TrainOutput> out;
    if (sparse_dist_ != nullptr) {
        out = sparse_dist_->progress(inputs);
    } else if (std::optional<TrainInput> in = inputs.next()) {
        if (in->before_forward)
            in->before_forward(pipeline_.stream());
        out = TrainOutput{
            in->step, pipeline_.progress(in->batch, in->dense_lr, in->sparse_lr, in->input_finite)};
    }
    if (out)
        out->result = finish_step(out->result, out->step);
    return out;
}

StepResult Trainer::finish_step(const StepResult& r, int64_t step) {
    if (r.skipped) {
        log::root().warn(
            "train step {}: a rank saw NaN or Inf; the batch is skipped on every "
            "rank (runtime.nan_policy: skip_batch)",
            step + 1);
        return r;
    }
    SR_CHECK(std::isfinite(r.loss),
             "train step {}: the loss is {} (runtime.nan_policy: stop; skip_batch skips such "
             "batches on every rank)",
             step + 1, r.loss);
    return r;
}

Metrics Trainer::evaluate(MetricsAccumulator* samples) {
    return *evaluate_batches(samples, nullptr);
}

std::optional<Metrics> Trainer::evaluate_unless(const std::function<bool()>& stop) {
    return evaluate_batches(nullptr, &stop);
}

std::optional<Metrics> Trainer::evaluate_batches(MetricsAccumulator* samples,
                                                 const std::function<bool()>* stop) {
    // A queued batch's remap has already counted its ids (and taken slots for new ones).
    SR_CHECK(!ahead_of_model(),
             "evaluation with managed-collision tables while the pipeline holds {} remapped "
             "batch(es): train them first",
             num_queued());
    eval_acc_.reset();
    const kernels::RowInvariantGemmsScope scoring;  // the GEMMs of eval, predict and serve
    // Every rank runs the same number of batches (the sharded lookups are collective): the eval
    // split's first eval_samples samples, rounded up to whole global batches.
    const int64_t B = config_.data.batch_size;
    const int64_t global = global_batch_size();
    const int64_t steps = (config_.train.eval_samples + global - 1) / global;
    for (int64_t i = 0; i < steps; ++i) {
        if (stop != nullptr && (*stop)())
            return std::nullopt;
        const int64_t start = i * global + rank_ * B;
        Batch batch = dataset_->batch(start, B, data::Split::kEval);
        if (!mc_.empty())
            batch = mc_.remap_eval(batch);
        bool finite = true;
        const Batch& checked = checker_.check(batch, BatchOrigin{"eval", i + 1, rank_}, finite);
        const Tensor& logits = pipeline_.predict(checked);  // collective: every rank runs it
        if (finite) {  // skip_batch: a batch with NaN or Inf inputs does not count
            eval_acc_.add(logits, checked.labels);
        }
        if (samples != nullptr) {
            // This batch's samples are consecutive over the ranks: gathered in rank order they
            // are in sample order.
            MetricsAccumulator batch_pairs;
            if (finite) {
                batch_pairs.add(logits, checked.labels);
            }
            const MetricsAccumulator all = all_gather_pairs(batch_pairs, pg_.get());
            samples->add(all.logits().data(), all.labels().data(), all.count());
        }
    }
    return pipeline_.global_metrics(eval_acc_);
}

namespace {

// The key_value caches over the steps since the last record: metrics.jsonl and the log.
void log_cache_window(const std::vector<std::pair<std::string, CacheStats>>& totals,
                      int64_t step,
                      std::vector<CacheStats>& seen,
                      MetricsWriter& writer) {
    seen.resize(totals.size());
    for (size_t i = 0; i < totals.size(); ++i) {
        const CacheStats& t = totals[i].second;
        CacheStats& s = seen[i];
        const CacheStats w{t.lookups - s.lookups,   t.unique_rows - s.unique_rows,
                           t.misses - s.misses,     t.overflow - s.overflow,
                           t.bytes_in - s.bytes_in, t.bytes_out - s.bytes_out};
        s = t;
        writer.cache(step, totals[i].first, w);
        log::root().debug(
            "cache of table '{}' at step {}: hit rate {:.4f}, {} misses of {} rows, "
            "{} overflow, {:.1f} MB in, {:.1f} MB out",
            totals[i].first, step, w.hit_rate(), w.misses, w.unique_rows, w.overflow,
            static_cast<double>(w.bytes_in) / 1e6, static_cast<double>(w.bytes_out) / 1e6);
    }
}

}  // namespace

TrainSummary run(const Config& config, const RunDir& run_dir, const std::string& resume) {
    const int threads = configure_threads(config);
    Trainer trainer(config, default_process_group());
    trainer.set_run_id(run_dir.run_id());
    // A resumed run continues at the checkpoint's step and sample position.
    const int64_t start = resume.empty() ? 0 : load_checkpoint(trainer, resume, {true});
    run_dir.write_config(start);
    trainer.set_prefetch_depth(trainer.device().is_cuda() ? std::max(kPrefetchDepth, threads)
                                                          : kPrefetchDepth);
    const std::string& checkpoint_dir = run_dir.checkpoint_dir();
    const int rank = comm::process_info().rank;
    MetricsWriter writer(run_dir.path(), rank == 0);
    if (run_dir.continued())
        writer.resume(start, resume);
    Progress progress(config.train.steps, config.train.log_every);
    const FaultInjector faults(config.model);
    log::root().info("training {} ({} tables) for {} steps, batch {} per rank", config.model.type,
                     config.model.tables.size(), config.train.steps, config.data.batch_size);
    if (const int64_t global = trainer.global_batch_size(); config.train.eval_samples % global != 0)
        log::root().info("train.eval_samples {} evaluates as {}: whole global batches of {}",
                         config.train.eval_samples,
                         (config.train.eval_samples + global - 1) / global * global, global);
    if (start > 0 && start >= config.train.steps)
        log::root().warn(
            "the checkpoint is at step {} and train.steps is {}: nothing to train "
            "(raise train.steps to go on)",
            start, config.train.steps);
    const comm::ProcessInfo& info = comm::process_info();
    log::all().info("on {}: local rank {} of {}, {} threads", info.host, info.local_rank,
                    info.local_size, threads);

    TrainSummary summary;
    const auto t0 = Clock::now();
    auto window_t0 = t0;
    int64_t window_samples = 0;
    std::vector<CacheStats> cache_seen;  // the key_value caches at the last record
    int64_t done = start;
    const int64_t every = config.train.checkpoint_every;
    // The inputs of steps [first, end): all at once, or, with managed-collision tables (whose
    // remap runs when the pipeline takes a batch), up to the next checkpoint or evaluation, so
    // that the pipeline has trained every batch it took when they come.
    int64_t end = config.train.steps;
    const auto inputs_from = [&](int64_t first) {
        end = config.train.steps;
        const auto before_next = [&](int64_t interval) {
            if (interval > 0)
                end = std::min(end, (first / interval + 1) * interval);
        };
        if (!trainer.managed_collision().empty()) {
            before_next(every);
            if (config.train.eval_samples > 0)
                before_next(config.train.eval_every);
        }
        return trainer.train_inputs(first, end, [&faults, rank](int64_t step, Batch& batch) {
            if (!faults.empty()) {
                faults.apply(step + 1, rank, batch);
            }
        });
    };
    std::unique_ptr<DataIterator> inputs = inputs_from(start);
    int stop_signal = 0;
    std::vector<ManagedCollisionRecord> records;
    int64_t saved_step = start;  // the newest step whose checkpoint is on disk (or resumed from)
    // train.steps 0: the initial weights as step 0 (what `ckpt init` writes), to take elsewhere.
    if (config.train.steps == 0 && start == 0 && every > 0)
        save_checkpoint(trainer, checkpoint_dir, 0, config.train.checkpoint_keep);
    // SIGINT/SIGTERM/SIGUSR1 only set a flag; the ranks agree on it through a one-int all-reduce
    // per step (and per evaluation batch), read one late so that it never waits for a peer
    // (comm/stop_signal.h), and all stop here at the same step. A stopped run keeps its training,
    // whatever train.checkpoint_every: the last finished step is saved first (a SLURM preemption
    // sends SIGTERM, then SIGKILL after KillWait), and `--resume auto` continues from it.
    comm::StopVote stop_vote(default_process_group());
    const auto stop_polled = [&] { return stop_signal != 0 || (stop_signal = stop_vote.poll()); };
    while (!summary.target_reached) {
        // On a stop, the batches whose remap ran are trained first (the inputs end).
        if (stop_signal == 0 && stop_polled() && trainer.ahead_of_model())
            inputs = std::make_unique<NoInputs>();
        if (stop_signal != 0 && !trainer.ahead_of_model()) {
            std::string saved;
            if (done > saved_step) {
                save_checkpoint(trainer, checkpoint_dir, done, config.train.checkpoint_keep);
                saved = fmt::format("step {} is saved in {}", done, checkpoint_dir);
            } else if (done > 0) {
                saved = fmt::format("step {}'s checkpoint was saved before", done);
            }
            throw comm::StopRequested(stop_signal, done + 1, saved);
        }
        const std::optional<TrainOutput> out = trainer.progress(*inputs);
        if (!out) {
            if (done == config.train.steps || done != end)
                break;
            inputs = inputs_from(done);  // up to the next checkpoint or evaluation
            continue;
        }
        const int64_t step = out->step;
        done = step + 1;
        // The records of the steps trained so far (the pipeline may have remapped later ones).
        for (ManagedCollisionRecord& rec : trainer.managed_collision().take_records())
            records.push_back(std::move(rec));
        const auto later = std::stable_partition(records.begin(), records.end(),
                                                 [&](const auto& rec) { return rec.step <= done; });
        for (auto rec = records.begin(); rec != later; ++rec)
            writer.managed_collision(rec->step, rec->table, rec->occupancy, rec->slots,
                                     rec->evictions, rec->admissions, rec->hit_fraction);
        records.erase(records.begin(), later);
        const StepResult& r = out->result;
        summary.skipped_batches += r.skipped ? 1 : 0;
        window_samples += trainer.global_batch_size();
        if (done % config.train.log_every == 0 || done == config.train.steps) {
            const double sps = static_cast<double>(window_samples) / seconds_since(window_t0);
            const double steps_in_window = static_cast<double>(window_samples) /
                                           static_cast<double>(trainer.global_batch_size());
            writer.train(done, r.loss, trainer.dense_lr(step), sps,
                         1e3 * trainer.take_loader_wait_s() / steps_in_window);
            log_cache_window(trainer.cache_totals(), done, cache_seen, writer);
            progress.update(done, r.loss, sps);
            window_t0 = Clock::now();
            window_samples = 0;
        }
        const bool last = done == config.train.steps;
        // The checkpoint of a finished step comes before its evaluation, so an evaluation that
        // fails loses no training.
        if (every > 0 && (done % every == 0 || last)) {
            save_checkpoint(trainer, checkpoint_dir, done, config.train.checkpoint_keep);
            saved_step = done;
            window_t0 = Clock::now();
        }
        const bool eval_due =
            last || (config.train.eval_every > 0 && done % config.train.eval_every == 0);
        if (config.train.eval_samples > 0 && eval_due) {
            faults.before_eval(done, rank);
            const std::optional<Metrics> evaluated = trainer.evaluate_unless(stop_polled);
            if (!evaluated) {
                progress.message(fmt::format("eval step {}: cut short by {}", done,
                                             comm::stop_signal_name(stop_signal)));
                continue;  // the stop, at the top of the loop
            }
            const Metrics& m = *evaluated;
            writer.eval(done, m);
            progress.message(fmt::format(
                "eval step {}: loss {:.5f} auc {:.5f} ne {:.5f} acc {:.4f} calibration {:.4f}",
                done, m.loss, m.auc, m.ne, m.accuracy, m.calibration));
            summary.last_eval_auc = m.auc;
            summary.last_eval_loss = m.loss;
            // Every rank computed the same metrics from the same gathered pairs, so every rank
            // takes the same decision without another collective.
            if (config.train.target_auc > 0 && m.auc >= config.train.target_auc) {
                summary.target_reached = true;
                writer.target_reached(done, m.auc, config.train.target_auc);
                progress.message(
                    fmt::format("eval AUC {:.5f} reached train.target_auc {} at step {}", m.auc,
                                config.train.target_auc, done));
            }
            window_t0 = Clock::now();  // evaluation time is not training throughput
        }
        if (every > 0 && summary.target_reached && saved_step != done) {
            save_checkpoint(trainer, checkpoint_dir, done, config.train.checkpoint_keep);
            saved_step = done;
            window_t0 = Clock::now();
        }
    }
    if (trainer.batch_checker().invalid_ids() > 0) {
        log::all().warn("{} ids outside their tables were read as row 0 (runtime.bounds_check)",
                        trainer.batch_checker().invalid_ids());
    }
    if (summary.skipped_batches > 0) {
        log::root().warn("{} batches were skipped for NaN or Inf (runtime.nan_policy: skip_batch)",
                         summary.skipped_batches);
    }
    summary.steps = done;
    summary.samples = (done - start) * trainer.global_batch_size();
    summary.wall_s = seconds_since(t0);
    writer.done(summary.steps, summary.samples, summary.wall_s);
    progress.finish();
    if (const auto* sharded =
            dynamic_cast<const ShardedEmbeddingBagCollection*>(&trainer.model().sparse_arch());
        sharded != nullptr && sharded->has_cached_shards()) {
        log::all().info(
            "cached tables: {:.3f} GB of rows on disk, {:.3f} GB in host memory (key_value: "
            "its index), {:.3f} GB of cache",
            static_cast<double>(sharded->storage_disk_bytes()) / 1e9,
            static_cast<double>(sharded->storage_host_bytes()) / 1e9,
            static_cast<double>(sharded->parameter_bytes()) / 1e9);
    }
    return summary;
}

}  // namespace shardrec::train
