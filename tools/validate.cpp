// `shardrec validate CONFIG.yaml [--set K=V ...] [--reference]`: reads the config exactly as
// `train` does and prints it resolved (every default filled in), or every error found.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "comm/mpi_env.h"
#include "engine/config/config.h"
#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/distributed/memory_check.h"
#include "engine/distributed/planner.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kValidateUsage =
    "usage: shardrec validate CONFIG.yaml [--set KEY=VALUE ...]\n"
    "       shardrec validate --reference\n"
    "\n"
    "Reads CONFIG.yaml strictly (unknown keys, wrong types and broken model rules are errors,\n"
    "all reported at once with file:line:col) and prints the resolved config; exit 1 on errors.\n"
    "Also checks that each rank's planned memory (tables, optimizer state, buffers, activations)\n"
    "fits the memory this machine gives the process, as `train` does before allocating.\n"
    "The sharding section's ranks are checked for the world validate runs in: one process\n"
    "trains unsharded, so check a launch of N ranks under `mpirun -np N`, or anywhere with\n"
    "`shardrec plan CONFIG.yaml --world-size N --planner config`.\n"
    "\n"
    "  --set KEY=VALUE   override one key before reading, e.g. --set train.steps=100,\n"
    "                    --set model.tables[0].num_embeddings=1000, --set model.top_mlp=[64,1]\n"
    "  --reference       print every config key with its type, default and meaning (Markdown)\n";

int validate_main(const std::vector<std::string>& args) {
    std::string path;
    std::vector<std::string> sets;
    bool reference = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (take_set(args, i, sets, kValidateUsage)) {
            continue;
        }
        if (arg == "--help" || arg == "-h") {
            if (comm::process_info().rank == 0) {
                std::fputs(kValidateUsage, stdout);
            }
            return 0;
        }
        if (arg == "--reference") {
            reference = true;
        } else if (!arg.empty() && arg[0] == '-') {
            throw UsageError(fmt::format("unknown option '{}'", arg), kValidateUsage);
        } else if (path.empty()) {
            path = arg;
        } else {
            throw UsageError(fmt::format("unexpected argument '{}'", arg), kValidateUsage);
        }
    }
    const bool rank0 = comm::process_info().rank == 0;
    if (reference && rank0) {
        std::fputs(config_reference().c_str(), stdout);
    }
    if (path.empty()) {
        if (reference) {
            return 0;
        }
        throw UsageError("validate needs a CONFIG.yaml", kValidateUsage);
    }
    const Config config = load_config(path, sets);
    // The memory a run of this config would plan on this machine, as `train` checks it.
    const comm::ProcessInfo& info = comm::process_info();
    const std::string& device = config.runtime.device;
    const int gpus = std::max(1, cuda::device_count());
    check_memory_fits(
        config, info.world_size, info.local_size, info.rank,
        device == "cuda" ? Device::cuda(info.local_rank % gpus) : Device::parse(device));
    if (info.world_size == 1 && config.sharding.plan_file.empty())
        note_unchecked_rank_lists(config.sharding);
    if (rank0) {
        std::fputs(dump_config(config).c_str(), stdout);
    }
    return 0;
}

}  // namespace shardrec::cli
