// `shardrec bench CONFIG.yaml [--steps N] [--warmup N] [--profile] [--json FILE] [--set K=V ...]`:
// end-to-end training throughput of a config on this machine, with its ceilings. Steps run on
// batches made before timing, so the data generator is not measured. Reports the median step time
// and samples/s, the host memory copy bandwidth and the random-row read bandwidth on the largest
// table's size and row width (the ceilings of the embedding lookups), how much of the process is
// on transparent huge pages against the table bytes, peak memory
// against the bytes the model and its optimizer state need, and the number of allocations per step
// after warm-up (the training loop must make none). With several ranks, rank 0 reports: the
// slowest rank's step time, the largest memory and allocation counts. On a CUDA device
// (runtime.device) it also measures the device-to-device copy bandwidth, the ceiling of the
// embedding lookups there. Kernel-level rates against their ceilings come from bench_ops over the
// backend-ops cases (scripts/bench.sh runs both). --profile adds where the step's time goes: the
// device time of each region of the step (forward/dense_arch, backward/sparse_arch/lookup, ...) in
// the compute stream's order, from events recorded around them (engine/core/profile.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "comm/collective_utils.h"
#include "comm/mpi_env.h"
#include "engine/config/config.h"
#include "engine/core/allocator.h"
#include "engine/core/durable_file.h"
#include "engine/core/log.h"
#include "engine/core/profile.h"
#include "engine/core/version.h"
#include "engine/distributed/planner_estimate.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/linear.h"
#include "kernels/device_ceilings.h"
#include "kernels/linear.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kBenchUsage =
    "usage: shardrec bench CONFIG.yaml [--steps N] [--warmup N] [--profile] [--json FILE]\n"
    "                      [--set K=V ...]\n"
    "\n"
    "Times training steps of CONFIG.yaml on batches of its data (data.type) made before timing.\n"
    "\n"
    "  --steps N        timed steps (default 50)\n"
    "  --warmup N       untimed steps first (default 5), and at least one over each batch, so\n"
    "                   that the buffers sized by the largest batch are grown before timing\n"
    "  --profile        also time each region of the step (forward/dense_arch, ...) with events\n"
    "                   recorded around it on its stream\n"
    "  --json FILE      also write the results as one JSON object\n"
    "  --set KEY=VALUE  override one config key (repeatable)\n";

namespace {

using Clock = std::chrono::steady_clock;

int64_t dense_bytes(RecModel& model, DenseOptimizer& optimizer) {
    int64_t bytes = 0;
    for (Parameter* p : model.parameters())
        bytes += 2 * static_cast<int64_t>(p->value.nbytes());
    for (auto& [name, t] : optimizer.state())
        bytes += static_cast<int64_t>(t->nbytes());
    return bytes;
}

// One device type's memory and allocations, at their largest over the ranks.
struct RankMemory {
    int64_t max_peak_bytes = 0;
    int peak_rank = 0;
    int64_t max_allocs = 0;  // in the timed steps
};

// The step times, memory and allocations of every rank, summed up for rank 0's report.
struct RankTimes {
    int ranks = 1;
    double median_s = 0, p10_s = 0, p90_s = 0;  // of the slowest rank (largest median)
    int slowest_rank = 0;
    double fastest_median_s = 0;
    int fastest_rank = 0;
    RankMemory host, device;
    std::vector<int64_t> model_bytes;  // per rank: tables, optimizer state and dense
};

// Every rank's value, in rank order (pg null: one process, its own). Collective over pg.
std::vector<int64_t> every_rank(comm::ProcessGroup* pg, int64_t mine) {
    return pg ? comm::all_gather_int64(*pg, mine) : std::vector<int64_t>{mine};
}

// Collective over pg (null: one process). step_s is sorted; before and after bracket the timed
// steps, indexed by DeviceType.
RankTimes gather_rank_times(comm::ProcessGroup* pg,
                            const std::vector<double>& step_s,
                            const AllocStats (&before)[2],
                            const AllocStats (&after)[2],
                            int64_t model_bytes) {
    const auto ns = [](double s) { return static_cast<int64_t>(s * 1e9); };
    constexpr int kCpu = static_cast<int>(DeviceType::kCpu);
    constexpr int kCuda = static_cast<int>(DeviceType::kCuda);
    const int64_t mine[8] = {ns(step_s[step_s.size() / 2]),
                             ns(step_s[step_s.size() / 10]),
                             ns(step_s[step_s.size() * 9 / 10]),
                             model_bytes,
                             after[kCpu].peak_bytes,
                             after[kCpu].num_allocs - before[kCpu].num_allocs,
                             after[kCuda].peak_bytes,
                             after[kCuda].num_allocs - before[kCuda].num_allocs};
    std::vector<int64_t> all[8];
    for (int k = 0; k < 8; ++k)
        all[k] = every_rank(pg, mine[k]);
    RankTimes t;
    t.ranks = static_cast<int>(all[0].size());
    RankMemory* memory[2] = {&t.host, &t.device};
    for (int r = 0; r < t.ranks; ++r) {
        if (all[0][r] > all[0][t.slowest_rank])
            t.slowest_rank = r;
        if (all[0][r] < all[0][t.fastest_rank])
            t.fastest_rank = r;
        for (int d = 0; d < 2; ++d) {
            RankMemory& m = *memory[d];
            if (all[4 + 2 * d][r] > all[4 + 2 * d][m.peak_rank])
                m.peak_rank = r;
            m.max_allocs = std::max(m.max_allocs, all[5 + 2 * d][r]);
        }
    }
    for (int d = 0; d < 2; ++d)
        memory[d]->max_peak_bytes = all[4 + 2 * d][memory[d]->peak_rank];
    t.model_bytes = all[3];
    t.median_s = static_cast<double>(all[0][t.slowest_rank]) * 1e-9;
    t.p10_s = static_cast<double>(all[1][t.slowest_rank]) * 1e-9;
    t.p90_s = static_cast<double>(all[2][t.slowest_rank]) * 1e-9;
    t.fastest_median_s = static_cast<double>(all[0][t.fastest_rank]) * 1e-9;
    return t;
}

// CPUs of this machine kept busy by other processes over `window_s` while this one sleeps
// (/proc/stat's busy jiffies), or -1 when it cannot be read.
double other_busy_cpus(double window_s) {
    const auto busy_total = [] {
        std::ifstream f("/proc/stat");
        std::string cpu;
        int64_t v = 0, busy = 0, total = 0;
        f >> cpu;
        for (int i = 0; i < 8 && (f >> v); ++i) {  // user nice system idle iowait irq softirq steal
            total += v;
            busy += i == 3 || i == 4 ? 0 : v;
        }
        return std::pair<int64_t, int64_t>{cpu == "cpu" ? busy : -1, total};
    };
    const auto [b0, t0] = busy_total();
    std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
    const auto [b1, t1] = busy_total();
    if (b0 < 0 || b1 < 0 || t1 <= t0)
        return -1;
    return static_cast<double>(b1 - b0) / static_cast<double>(t1 - t0) *
           static_cast<double>(std::thread::hardware_concurrency());
}

}  // namespace

int bench_main(const std::vector<std::string>& args) {
    std::string path, json;
    int64_t steps = 50, warmup = 5;
    bool profiled = false;
    std::vector<std::string> sets;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (take_set(args, i, sets, kBenchUsage))
            continue;
        const bool has_value = i + 1 < args.size();
        if (a == "--steps" && has_value) {
            steps = parse_positive(a, args[++i], kBenchUsage);
        } else if (a == "--warmup" && has_value) {
            warmup = parse_positive(a, args[++i], kBenchUsage);
        } else if (a == "--profile") {
            profiled = true;
        } else if (a == "--json" && has_value) {
            json = args[++i];
        } else if (a == "--help" || a == "-h") {
            std::fputs(kBenchUsage, stdout);
            return 0;
        } else if (!a.empty() && a[0] != '-' && path.empty()) {
            path = a;
        } else {
            throw UsageError(fmt::format("unexpected argument '{}'", a), kBenchUsage);
        }
    }
    if (path.empty())
        throw UsageError("bench needs a CONFIG.yaml", kBenchUsage);

    const Config config = load_config(path, sets);
    if (!json.empty())
        check_output_file("--json", json);
    const int threads = train::configure_threads(config);
    // Timings and ceilings measured while other work holds the CPUs describe that work too.
    const double busy = other_busy_cpus(0.2);
    if (comm::process_info().rank == 0 && busy > 0.5)
        log::root().warn(
            "bench: other processes kept {:.1f} of this machine's {} CPUs busy just before the "
            "measurements; the step times and ceilings below include that load",
            busy, std::thread::hardware_concurrency());
    const double copy_gbps = kernels::host_copy_gbps();
    // The random-row ceiling on the largest table's rows (a multiple of 4 bytes) and size, up to
    // 2 GiB: measured before the model exists, so that its table is not in memory twice.
    int64_t rr_row_bytes = 4;
    size_t rr_table_bytes = 0;
    for (const ModelConfig::Table& t : config.model.tables) {
        const int64_t row = t.embedding_dim * dtype_size(dtype_from_name(t.data_type));
        const auto bytes = static_cast<size_t>(t.num_embeddings * row);
        if (bytes > rr_table_bytes) {
            rr_table_bytes = bytes;
            rr_row_bytes = (row + 3) / 4 * 4;
        }
    }
    rr_table_bytes = std::clamp(rr_table_bytes, static_cast<size_t>(rr_row_bytes), size_t{2} << 30);
    const double random_row_gbps = kernels::host_random_row_gbps(rr_row_bytes, rr_table_bytes);
    train::Trainer trainer(config, train::default_process_group());
    std::vector<Batch> batches;
    const auto data_t0 = Clock::now();
    // Up to 16 batches, cycled; with cached tables (key_value, fused_uvm_caching) a batch for
    // every step, since a batch seen before would find its rows in the cache.
    bool cached = false;
    for (const ModelConfig::Table& t : config.model.tables) {
        const auto kernel = parse_compute_kernel(config.sharding.kernel_of(t.name));
        cached = cached || (kernel && is_cached_kernel(*kernel));
    }
    const int64_t made = cached ? warmup + steps : std::min<int64_t>(warmup + steps, 16);
    for (int64_t s = 0; s < made; ++s) {
        batches.push_back(trainer.train_batch(s));
    }
    const double data_ms = std::chrono::duration<double>(Clock::now() - data_t0).count() * 1e3 /
                           static_cast<double>(batches.size());
    if (!cached)
        warmup = std::max(warmup, static_cast<int64_t>(batches.size()));
    // One process: the embedding traffic of (up to 4 of) these batches, their touched rows
    // counted, is the floor of the step's sparse part. Sharded, each rank's share depends on the
    // plan, and no floor is given.
    std::optional<SparseTraffic> traffic;
    if (trainer.process_group() == nullptr || trainer.process_group()->size() == 1) {
        traffic.emplace();
        const size_t n = std::min<size_t>(batches.size(), 4);
        for (size_t i = 0; i < n; ++i) {
            const SparseTraffic t = CostModel::sparse_traffic(config, batches[i].sparse);
            traffic->ids += t.ids;
            traffic->rows_touched += t.rows_touched;
            traffic->lookup_bytes += t.lookup_bytes / static_cast<double>(n);
            traffic->update_bytes += t.update_bytes / static_cast<double>(n);
        }
        traffic->ids /= static_cast<int64_t>(n);
        traffic->rows_touched /= static_cast<int64_t>(n);
    }
    const auto inputs = trainer.cycled_inputs(batches, warmup + steps);
    for (int64_t s = 0; s < warmup; ++s)
        (void)trainer.progress(*inputs);

    trainer.reset_stage_times();
    if (profiled)
        profile::enable(trainer.device());
    // The pooled output dists' bytes between ranks (comm.qcomms shrinks them), over the timed
    // steps.
    const auto* sharded =
        dynamic_cast<const ShardedEmbeddingBagCollection*>(&trainer.model().sparse_arch());
    const CommBytes comm_before = sharded ? sharded->pooled_comm_bytes() : CommBytes{};
    const CommBytes ids_before = sharded ? sharded->input_comm_bytes() : CommBytes{};
    const std::vector<std::pair<std::string, CacheStats>> cache_before = trainer.cache_totals();
    const AllocStats before[2] = {alloc_stats(DeviceType::kCpu), alloc_stats(DeviceType::kCuda)};
    std::vector<double> step_s;
    for (int64_t s = warmup; s < warmup + steps; ++s) {
        const auto t0 = Clock::now();
        (void)trainer.progress(*inputs);
        step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const AllocStats after[2] = {alloc_stats(DeviceType::kCpu), alloc_stats(DeviceType::kCuda)};
    const CommBytes comm_after = sharded ? sharded->pooled_comm_bytes() : CommBytes{};
    const CommBytes ids_after = sharded ? sharded->input_comm_bytes() : CommBytes{};
    // The caches over the timed steps, every table and rank together; the disk they use.
    const std::vector<std::pair<std::string, CacheStats>> cache_after = trainer.cache_totals();
    CacheStats cache;
    for (size_t i = 0; i < cache_after.size(); ++i) {
        const CacheStats &a = cache_after[i].second, &b = cache_before[i].second;
        cache.unique_rows += a.unique_rows - b.unique_rows;
        cache.misses += a.misses - b.misses;
        cache.overflow += a.overflow - b.overflow;
        cache.bytes_in += a.bytes_in - b.bytes_in;
        cache.bytes_out += a.bytes_out - b.bytes_out;
    }
    int64_t storage_bytes = 0;
    if (sharded != nullptr && !cache_after.empty()) {
        for (int64_t b : every_rank(trainer.process_group().get(), sharded->storage_disk_bytes()))
            storage_bytes += b;
    }
    // Summed over the ranks (each counts what it sends to the others), per step. Pooled:
    // [2], [3]: the part that went to ranks on other nodes (comm.hierarchical shrinks it); ids:
    // [4] the input dists' all-to-alls, [5] their part to other nodes.
    std::array<double, 6> comm_per_step = {0, 0, 0, 0, 0, 0};
    if (sharded != nullptr) {
        const int64_t mine[6] = {comm_after.forward - comm_before.forward,
                                 comm_after.backward - comm_before.backward,
                                 comm_after.forward_cross_node - comm_before.forward_cross_node,
                                 comm_after.backward_cross_node - comm_before.backward_cross_node,
                                 ids_after.forward - ids_before.forward,
                                 ids_after.forward_cross_node - ids_before.forward_cross_node};
        for (int d = 0; d < 6; ++d) {
            for (int64_t b : every_rank(trainer.process_group().get(), mine[d]))
                comm_per_step[static_cast<size_t>(d)] +=
                    static_cast<double>(b) / static_cast<double>(steps);
        }
    }
    // The dense gradients' all-reduce: one buffer of every parameter a step on each rank.
    int64_t allreduce_values = 0;
    for (Parameter* p : trainer.model().parameters())
        allreduce_values += p->value.numel();
    const int64_t allreduce_bytes =
        trainer.process_group() == nullptr || trainer.process_group()->size() == 1
            ? 0
            : allreduce_values * (config.comm.allreduce_precision == "fp32" ? 4 : 2);
    const std::vector<profile::RegionTime> regions =
        profiled ? profile::collect() : std::vector<profile::RegionTime>{};
    const std::optional<train::StageTimes> stages = trainer.stage_times();
    std::sort(step_s.begin(), step_s.end());
    const EmbeddingBagCollectionInterface& ebc = trainer.model().sparse_arch();
    const int64_t table_bytes = ebc.parameter_bytes();
    const int64_t state_bytes = ebc.optimizer_state_bytes();
    const int64_t dense = dense_bytes(trainer.model(), trainer.dense_optimizer());
    const HugePageUsage huge_pages = huge_page_usage();  // rank 0's, with its tables alive
    // The ranks step together, so the slowest rank's median is the job's step time; memory and
    // allocations are each rank's own, reported at their largest. Rank 0 reports for all.
    const RankTimes times = gather_rank_times(trainer.process_group().get(), step_s, before, after,
                                              table_bytes + state_bytes + dense);
    if (comm::process_info().rank != 0)
        return 0;
    const double med = times.median_s, p10 = times.p10_s, p90 = times.p90_s;
    const double sps = static_cast<double>(trainer.global_batch_size()) / med;
    const double allocs_per_step =
        static_cast<double>(times.host.max_allocs) / static_cast<double>(steps);
    const double device_allocs_per_step =
        static_cast<double>(times.device.max_allocs) / static_cast<double>(steps);
    const Device device = trainer.device();
    // The model's bytes live on its device: the GPU's peak is set against them under CUDA.
    const RankMemory& model_memory = device.is_cuda() ? times.device : times.host;
    const double device_copy_gbps =
        device.is_cuda() ? kernels::cuda::measure_copy_gbps(device.index) : 0;
    // The dense work's floor: forward + backward take about 3x the forward FLOPs, here at the GEMM
    // rate measured on the model's largest layer at this batch (cuBLAS in runtime.gemm_math's
    // mode; on the CPU cblas_sgemm in f32, oneDNN's own bf16 matmul in bf16).
    const int64_t B = config.data.batch_size;
    const double dense_flop =
        3.0 * CostModel::dense_flops_per_sample(config.model) * static_cast<double>(B);
    const std::array<int64_t, 2> layer = CostModel::largest_linear(config.model);
    const double gemm_us =
        device.is_cuda() ? kernels::cuda::sgemm_time_us(device.index, B, layer[1], layer[0], 10)
                         : kernels::host_sgemm_time_us(B, layer[1], layer[0], 5);
    const double gemm_tflops =
        2.0 * static_cast<double>(B * layer[0] * layer[1]) / (gemm_us * 1e-6) / 1e12;
    const double dense_floor_ms = dense_flop / (gemm_tflops * 1e12) * 1e3;

    std::printf(
        "config            %s (%s, %zu tables, batch %ld per rank, %d threads, pipeline %s)\n",
        path.c_str(), config.model.type.c_str(), config.model.tables.size(),
        static_cast<long>(config.data.batch_size), threads, config.train.pipeline.c_str());
    std::printf("step time         median %.3f ms (p10 %.3f, p90 %.3f)\n", med * 1e3, p10 * 1e3,
                p90 * 1e3);
    std::printf("throughput        %.0f samples/s\n", sps);
    if (times.ranks > 1) {
        std::printf(
            "ranks             %d: median step %.3f ms (rank %d) to %.3f ms (rank %d), the slowest "
            "is the step time; stage times and profile are rank 0's\n",
            times.ranks, times.fastest_median_s * 1e3, times.fastest_rank, med * 1e3,
            times.slowest_rank);
    }
    // Per step: the copy and input dist are hidden when the step is about the compute alone.
    // compute, copy, input dist, cache fill ahead (prefetch thread), cache fill before forward
    double per_step[5] = {0, 0, 0, 0, 0};  // ms
    if (stages && stages->steps > 0) {
        const auto n = static_cast<double>(stages->steps);
        per_step[0] = stages->compute_ms / n;
        per_step[1] = stages->copy_ms / n;
        per_step[2] = stages->input_dist_ms / n;
        per_step[3] = stages->prefetch_ahead_ms / n;
        per_step[4] = stages->prefetch_ms / n;
        std::printf(
            "stage time        compute stream %.3f ms, copy stream %.3f ms, input dist %.3f ms "
            "(host) per step, over %ld steps\n",
            per_step[0], per_step[1], per_step[2], static_cast<long>(stages->steps));
        if (config.train.pipeline == "prefetch_sparse_dist") {
            std::printf(
                "cache fill        %.3f ms on the prefetch thread (beside the compute of "
                "the step before), %.3f ms before the forward, per step\n",
                per_step[3], per_step[4]);
        }
    }
    if (!cache_after.empty()) {
        const auto n = static_cast<double>(steps);
        std::printf(
            "cache             hit rate %.4f (distinct rows of a batch found in the cache), %.0f "
            "misses, %.0f overflow, %.1f MB in and %.1f MB out per step; %.2f GB on disk\n",
            cache.hit_rate(), static_cast<double>(cache.misses) / n,
            static_cast<double>(cache.overflow) / n, static_cast<double>(cache.bytes_in) / n / 1e6,
            static_cast<double>(cache.bytes_out) / n / 1e6,
            static_cast<double>(storage_bytes) / 1e9);
    }
    std::printf(
        "dense work        %.4g GFLOP per step: >= %.3f ms (%.0f %% of the step) at %.2f TFLOP/s, "
        "the %s GEMM [%ld x %ld] x [%ld x %ld] (gemm_math %s)\n",
        dense_flop / 1e9, dense_floor_ms, 100.0 * dense_floor_ms / (med * 1e3), gemm_tflops,
        device.is_cuda()                                   ? "cuBLAS"
        : kernels::gemm_math() != kernels::GemmMath::kBf16 ? "cblas_sgemm"
        : kernels::cpu::onednn_bf16_available()            ? "oneDNN bf16"
                                                           : "cblas_sgemm (bf16 operands)",
        static_cast<long>(B), static_cast<long>(layer[0]), static_cast<long>(layer[0]),
        static_cast<long>(layer[1]), config.runtime.gemm_math.c_str());
    if (!device.is_cuda()) {
        std::printf("cpu gemm          %s\n", kernels::cpu_gemm_backends().c_str());
        std::printf("cpu loops         %s\n", kernels::cpu_loop_build().c_str());
    }
    // The sparse floor at the bandwidth of the memory the tables are in.
    const double table_gbps = device.is_cuda() ? device_copy_gbps : copy_gbps;
    const double sparse_floor_ms = traffic ? traffic->total_bytes() / (table_gbps * 1e9) * 1e3 : 0;
    if (traffic) {
        std::printf(
            "sparse work       %.1f MB per step (lookup %.1f, fused update %.1f; %ld ids, %ld "
            "rows touched): >= %.3f ms (%.0f %% of the step) at %.1f GB/s (%s copy)\n",
            traffic->total_bytes() / 1e6, traffic->lookup_bytes / 1e6, traffic->update_bytes / 1e6,
            static_cast<long>(traffic->ids), static_cast<long>(traffic->rows_touched),
            sparse_floor_ms, 100.0 * sparse_floor_ms / (med * 1e3), table_gbps,
            device.is_cuda() ? "device" : "host");
        const double floor_ms = dense_floor_ms + sparse_floor_ms;
        std::printf(
            "step floor        >= %.3f ms: the dense and then the sparse work, each at its "
            "ceiling (%.0f samples/s); the step takes %.2fx that\n",
            floor_ms, static_cast<double>(trainer.global_batch_size()) / (floor_ms * 1e-3),
            med * 1e3 / floor_ms);
    }
    std::printf(
        "data              %.3f ms per batch (data.type %s, made before timing: not in the "
        "step time)\n",
        data_ms, config.data.type.c_str());
    std::printf(
        "ceiling           host memcpy %.2f GB/s (read + write); random rows of %ld B from a %.1f "
        "MiB table %.2f GB/s (read, the largest table's rows)\n",
        copy_gbps, static_cast<long>(rr_row_bytes), static_cast<double>(rr_table_bytes) / 1048576.0,
        random_row_gbps);
    std::printf("%s\n", describe_huge_pages(huge_pages, table_bytes).c_str());
    if (sharded != nullptr) {
        std::printf(
            "pooled comm       %.0f bytes per step between ranks (forward %.0f, backward %.0f; "
            "comm.qcomms forward %s, backward %s)\n",
            comm_per_step[0] + comm_per_step[1], comm_per_step[0], comm_per_step[1],
            config.comm.qcomms.forward.c_str(), config.comm.qcomms.backward.c_str());
        std::printf(
            "cross-node comm   %.0f bytes per step to other nodes (forward %.0f, backward "
            "%.0f; comm.hierarchical %s: %s)\n",
            comm_per_step[2] + comm_per_step[3], comm_per_step[2], comm_per_step[3],
            config.comm.hierarchical.c_str(), sharded->hierarchical() ? "on" : "off");
        std::printf(
            "ids comm          %.0f bytes per step between ranks (ids, bag lengths and "
            "weights of the input dists; %.0f to other nodes)\n",
            comm_per_step[4], comm_per_step[5]);
    }
    if (allreduce_bytes > 0)
        std::printf("all-reduce        %ld bytes a step on each rank (the dense gradients, %s)\n",
                    static_cast<long>(allreduce_bytes), config.comm.allreduce_precision.c_str());
    if (device.is_cuda()) {
        std::printf("device            %s, device copy %.1f GB/s (read + write)\n",
                    device.str().c_str(), device_copy_gbps);
    }
    // With several ranks the model bytes are rank 0's, and each peak is the largest rank's.
    const bool ranks = times.ranks > 1;
    const auto at_rank = [&](const RankMemory& m) {
        return ranks ? fmt::format(", rank {}, the most", m.peak_rank) : std::string();
    };
    std::printf(
        "model bytes       tables %.1f MiB + fused optimizer state %.1f MiB + dense %.1f MiB%s\n",
        table_bytes / 1048576.0, state_bytes / 1048576.0, dense / 1048576.0,
        ranks ? ", rank 0" : "");
    const double model_ratio =
        static_cast<double>(model_memory.max_peak_bytes) /
        static_cast<double>(
            std::max<int64_t>(1, times.model_bytes[static_cast<size_t>(model_memory.peak_rank)]));
    if (device.is_cuda()) {
        std::printf("peak GPU memory   %.1f MiB tracked (%.2fx its model bytes)%s\n",
                    times.device.max_peak_bytes / 1048576.0, model_ratio,
                    at_rank(times.device).c_str());
        std::printf("peak host memory  %.1f MiB tracked%s\n", times.host.max_peak_bytes / 1048576.0,
                    at_rank(times.host).c_str());
        std::printf("allocations/step  %.2f on the device, %.2f on the host, after warm-up%s\n",
                    device_allocs_per_step, allocs_per_step,
                    ranks ? ", on the rank with the most" : "");
    } else {
        std::printf("peak host memory  %.1f MiB tracked (%.2fx its model bytes)%s\n",
                    times.host.max_peak_bytes / 1048576.0, model_ratio,
                    at_rank(times.host).c_str());
        std::printf("allocations/step  %.2f after warm-up%s\n", allocs_per_step,
                    ranks ? ", on the rank with the most" : "");
    }
    if (!regions.empty()) {
        std::printf(
            "profile           device time per step, in the compute stream's order (the step "
            "time above is with the events on)\n");
        for (const profile::RegionTime& r : regions) {
            const double ms = r.total_ms / static_cast<double>(steps);
            const std::string name = std::string(static_cast<size_t>(2 * r.depth), ' ') +
                                     r.name.substr(r.name.rfind('/') + 1);
            std::printf("  %-32s %8.3f ms  %5.1f %%\n", name.c_str(), ms, 100.0 * ms / (med * 1e3));
        }
    }
    if (!json.empty()) {
        std::string profile_json;
        for (const profile::RegionTime& r : regions) {
            profile_json += fmt::format("{}\"{}\":{:.4f}", profile_json.empty() ? "" : ",", r.name,
                                        r.total_ms / static_cast<double>(steps));
        }
        write_file_atomically(
            json,
            fmt::format(
                "{{{},\"config\":\"{}\",\"model\":\"{}\",\"pipeline\":\"{}\",\"batch_size\":{},"
                "\"threads\":{},\"other_busy_cpus\":{:.2f},"
                "\"step_ms\":{:.4f},\"step_ms_p10\":{:.4f},\"step_ms_p90\":{:.4f},"
                "\"samples_per_s\":{:.1f},\"copy_gbps\":{:.3f},\"random_row_gbps\":{:.3f},"
                "\"random_row_bytes\":{},\"random_row_table_bytes\":{},\"thp_mode\":\"{}\","
                "\"anon_huge_bytes\":{},\"table_bytes\":{},"
                "\"optimizer_state_bytes\":{},\"dense_bytes\":{},\"peak_bytes\":{},"
                "\"host_peak_bytes\":{},\"allocs_per_step\":{:.3f},"
                "\"device_allocs_per_step\":{:.3f},"
                "\"data_ms_per_batch\":{:.4f},\"device\":\"{}\","
                "\"device_copy_gbps\":{:.1f},\"compute_ms\":{:.4f},\"copy_ms\":{:.4f},"
                "\"input_dist_ms\":{:.4f},\"prefetch_ahead_ms\":{:.4f},\"prefetch_ms\":{:.4f},"
                "\"dense_gflop_per_step\":{:.3f},\"gemm_math\":\"{}\",\"gemm_tflops\":{:.4f},"
                "\"dense_floor_ms\":{:.4f},\"sparse_bytes_per_step\":{:.0f},"
                "\"sparse_floor_ms\":{:.4f},\"pooled_comm_forward_bytes_per_step\":{:.0f},"
                "\"pooled_comm_backward_bytes_per_step\":{:.0f},"
                "\"cross_node_forward_bytes_per_step\":{:.0f},"
                "\"cross_node_backward_bytes_per_step\":{:.0f},"
                "\"input_comm_bytes_per_step\":{:.0f},"
                "\"input_cross_node_bytes_per_step\":{:.0f},\"allreduce_bytes\":{},"
                "\"allreduce_precision\":\"{}\",\"hierarchical\":{},"
                "\"qcomms_forward\":\"{}\",\"qcomms_backward\":\"{}\",\"cache_hit_rate\":{:.6f},"
                "\"cache_misses_per_step\":{:.1f},\"cache_bytes_in_per_step\":{:.0f},"
                "\"cache_bytes_out_per_step\":{:.0f},\"storage_disk_bytes\":{},"
                "\"profile_ms_per_step\":{{{}}}}}\n",
                provenance_json_fields(), path, config.model.type, config.train.pipeline,
                config.data.batch_size, threads, busy, med * 1e3, p10 * 1e3, p90 * 1e3, sps,
                copy_gbps, random_row_gbps, rr_row_bytes, rr_table_bytes, huge_pages.mode,
                huge_pages.anon_huge_bytes, table_bytes, state_bytes, dense,
                model_memory.max_peak_bytes, times.host.max_peak_bytes, allocs_per_step,
                device_allocs_per_step, data_ms, device.str(), device_copy_gbps, per_step[0],
                per_step[1], per_step[2], per_step[3], per_step[4], dense_flop / 1e9,
                config.runtime.gemm_math, gemm_tflops, dense_floor_ms,
                traffic ? traffic->total_bytes() : 0.0, sparse_floor_ms, comm_per_step[0],
                comm_per_step[1], comm_per_step[2], comm_per_step[3], comm_per_step[4],
                comm_per_step[5], allreduce_bytes, config.comm.allreduce_precision,
                sharded != nullptr && sharded->hierarchical() ? "true" : "false",
                config.comm.qcomms.forward, config.comm.qcomms.backward,
                cache_after.empty() ? 1.0 : cache.hit_rate(),
                static_cast<double>(cache.misses) / static_cast<double>(steps),
                static_cast<double>(cache.bytes_in) / static_cast<double>(steps),
                static_cast<double>(cache.bytes_out) / static_cast<double>(steps), storage_bytes,
                profile_json));
    }
    return 0;
}

}  // namespace shardrec::cli
