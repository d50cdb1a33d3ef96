// `shardrec plan CONFIG.yaml --world-size N [--topology FILE] [--planner auto|config]
// [--out PLAN.yaml] [--full] [--set K=V ...]`: plans the embedding tables of a config for N ranks
// without running them (any N, far beyond this machine) and prints TorchRec's plan table, the
// memory and predicted step time of every rank, and optionally writes the plan file that
// sharding.plan_file reads back.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>

#include "comm/mpi_env.h"
#include "engine/config/config.h"
#include "engine/core/durable_file.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/distributed/planner.h"
#include "engine/train/sample_cache_statistics.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kPlanUsage =
    "usage: shardrec plan CONFIG.yaml --world-size N [--topology FILE] [--planner auto|config]\n"
    "                     [--out PLAN.yaml] [--full] [--measured DIR] [--set KEY=VALUE ...]\n"
    "\n"
    "Shards the embedding tables of CONFIG.yaml over N ranks (only plans: N may be far larger\n"
    "than this machine) and prints the plan as TorchRec does, then the memory and predicted\n"
    "step time (lookup | comm | dense) of each rank. Exit 1 when the tables do not fit.\n"
    "\n"
    "  --world-size N    ranks to plan for (required)\n"
    "  --topology FILE   hardware (configs/topologies/*.yaml); default: sharding.topology, else\n"
    "                    the built-in one for runtime.device (cuda: 8 x H100 nodes; cpu: 2 ranks)\n"
    "  --planner P       auto (default): the cost-model planner, sharding.tables as constraints;\n"
    "                    config: the plan a run would use (manual rules or sharding.plan_file)\n"
    "  --out FILE        write the plan for sharding.plan_file\n"
    "  --full            list every rank and every shard (default: long lists are elided)\n"
    "  --measured DIR    a run directory: its key_value caches' hit rates (metrics.jsonl, the\n"
    "                    last window) beside the predicted ones\n"
    "  --set KEY=VALUE   override one config key (repeatable)\n";

namespace {

struct PlanArgs {
    std::string config;
    std::string topology;
    std::string planner = "auto";
    std::string out;
    int world_size = 0;
    bool full = false;
    std::string measured;
    std::vector<std::string> sets;
};

// The hit rate of each key_value table in the last cache record of RUN_DIR/metrics.jsonl.
std::map<std::string, double> measured_hit_rates(const std::string& run_dir) {
    std::map<std::string, double> out;
    if (run_dir.empty())
        return out;
    const std::string path = run_dir + "/metrics.jsonl";
    std::ifstream in(path);
    SR_CHECK(in.good(), "--measured: cannot read {}", path);
    const std::regex record(R"re("kind":"cache".*"table":"([^"]+)","hit_rate":([0-9.eE+-]+))re");
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
        if (std::regex_search(line, m, record))
            out[m[1]] = std::stod(m[2]);
    }
    return out;
}

// Returns false when --help was asked for.
bool parse_args(const std::vector<std::string>& args, PlanArgs& a) {
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (take_set(args, i, a.sets, kPlanUsage)) {
            continue;
        }
        if (arg == "--help" || arg == "-h") {
            return false;
        }
        if (arg == "--full") {
            a.full = true;
            continue;
        }
        const bool takes_value = arg == "--world-size" || arg == "--topology" ||
                                 arg == "--planner" || arg == "--out" || arg == "--measured";
        if (takes_value && i + 1 >= args.size()) {
            throw UsageError(fmt::format("{} needs a value", arg), kPlanUsage);
        }
        if (arg == "--world-size") {
            a.world_size = static_cast<int>(
                std::min<int64_t>(parse_positive(arg, args[++i], kPlanUsage), 1 << 30));
        } else if (arg == "--topology") {
            a.topology = args[++i];
        } else if (arg == "--planner") {
            a.planner = args[++i];
            if (a.planner != "auto" && a.planner != "config") {
                throw UsageError("--planner is auto or config, got '" + a.planner + "'",
                                 kPlanUsage);
            }
        } else if (arg == "--out") {
            a.out = args[++i];
        } else if (arg == "--measured") {
            a.measured = args[++i];
        } else if (!arg.empty() && arg[0] == '-') {
            throw UsageError(fmt::format("unknown option '{}'", arg), kPlanUsage);
        } else if (a.config.empty()) {
            a.config = arg;
        } else {
            throw UsageError(fmt::format("unexpected argument '{}'", arg), kPlanUsage);
        }
    }
    if (a.config.empty()) {
        throw UsageError("plan needs a CONFIG.yaml", kPlanUsage);
    }
    if (a.world_size == 0) {
        throw UsageError("plan needs --world-size N", kPlanUsage);
    }
    return true;
}

}  // namespace

int plan_main(const std::vector<std::string>& args) {
    const bool rank0 = comm::process_info().rank == 0;
    PlanArgs a;
    if (!parse_args(args, a)) {
        if (rank0) {
            std::fputs(kPlanUsage, stdout);
        }
        return 0;
    }
    const Config config = load_config(a.config, a.sets);
    if (!a.out.empty())
        check_output_file("--out", a.out);
    const std::string topology_file = a.topology.empty() ? config.sharding.topology : a.topology;
    // 2D parallelism: the plan is one sharding group's, replicated (sharding.replica_groups).
    const Topology world = resolve_topology(topology_file, config.runtime.device, a.world_size);
    const int group = sharding_group_size(config.sharding, a.world_size, world.local_size);
    Topology topology = world;
    if (group < a.world_size) {
        topology = resolve_topology(topology_file, config.runtime.device, group);
        topology.local_size = std::min<int64_t>(world.local_size, group);
    }
    // The cached tables' ids measured on the data, as a training run's auto planner measures
    // them (CacheStatistics); data that cannot be read here leaves them out.
    CacheStatistics stats;
    try {
        stats = train::sample_cache_statistics(config, static_cast<int>(topology.world_size));
    } catch (const Error& e) {
        log::root().warn("the cached tables' ids are taken as uniform: {}", e.what());
    }
    const ShardingPlan plan = a.planner == "auto"
                                  ? EmbeddingShardingPlanner(topology, &stats).plan(config)
                                  : make_sharding_plan(config, topology, &stats);
    const PlanEstimate estimate = estimate_plan(plan, config, topology, &stats);
    PlanTableOptions table_options;
    if (!a.full) {
        table_options.max_ranks = 8;
        table_options.max_shards_per_table = 8;
    }
    const bool fits = estimate.max_memory_bytes() <= estimate.memory_limit_bytes;
    if (rank0) {
        if (group < a.world_size) {
            fmt::print(
                "sharding.replica_groups {}: the plan of one sharding group of {} ranks, "
                "replicated {} times over the {} ranks\n\n",
                config.sharding.replica_groups, group, a.world_size / group, a.world_size);
        }
        // TorchRec prints a plan per module by its path in the model; the tables of every model
        // here are the sparse arch's one collection (TorchRec's DLRM names it so too).
        fmt::print("module: sparse_arch.embedding_bag_collection\n\n{}\n\n{}",
                   plan_table(plan, config.model.tables, table_options),
                   estimate_report(estimate, config, topology, a.full ? SIZE_MAX : 16));
        fmt::print("{}", cache_report(plan, config, measured_hit_rates(a.measured), &stats));
        fmt::print("{}", managed_collision_report(plan, config));
        if (!fits) {
            fmt::print("DOES NOT FIT: a rank needs {:.2f} GiB, the limit is {:.2f} GiB\n",
                       static_cast<double>(estimate.max_memory_bytes()) / 1073741824.0,
                       static_cast<double>(estimate.memory_limit_bytes) / 1073741824.0);
        }
        if (!a.out.empty()) {
            write_file_atomically(a.out, plan_to_yaml(plan, config.model.tables));
            fmt::print("plan written to {}\n", a.out);
        }
    }
    return fits ? 0 : 1;
}

}  // namespace shardrec::cli
