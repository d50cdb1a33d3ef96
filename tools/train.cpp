// `shardrec train CONFIG.yaml [--out DIR] [--set K=V ...]`: resolves the config, opens the run
// directory (locked, refused when it holds another run) and hands both to the training loop.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "comm/mpi_env.h"
#include "engine/config/config.h"
#include "engine/core/log.h"
#include "engine/core/version.h"
#include "engine/train/checkpoint.h"
#include "engine/train/run_dir.h"
#include "engine/train/trainer.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kTrainUsage =
    "usage: shardrec train CONFIG.yaml [--out DIR] [--resume CHECKPOINT] [--overwrite]\n"
    "                      [--set KEY=VALUE ...]\n"
    "\n"
    "Trains the model CONFIG.yaml describes; run several ranks with mpirun -np N.\n"
    "\n"
    "  --out DIR         run directory for config.yaml and metrics.jsonl\n"
    "                    (default runs/<YYYYmmdd-HHMMSS>)\n"
    "  --resume CKPT     continue from a checkpoint (a step-<N> directory, or the directory\n"
    "                    holding them: the newest intact one); any world size and plan\n"
    "  --resume auto     continue --out's own run from its newest checkpoint, or start it\n"
    "                    when it has none (a requeued or resubmitted job)\n"
    "  --overwrite       replace the files of another run found in --out (or in\n"
    "                    train.checkpoint_dir) instead of refusing to start\n"
    "  --set KEY=VALUE   override one config key, e.g. --set train.steps=100 (repeatable)\n"
    "\n"
    "SHARDREC_LOG_LEVEL=debug overrides runtime.log_level.\n";

int train_main(const std::vector<std::string>& args) {
    std::string path;
    std::string out;
    std::string resume;
    bool overwrite = false;
    std::vector<std::string> sets;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (take_set(args, i, sets, kTrainUsage)) {
            continue;
        }
        if (arg == "--help" || arg == "-h") {
            if (comm::process_info().rank == 0) {
                std::fputs(kTrainUsage, stdout);
            }
            return 0;
        }
        if (arg == "--overwrite") {
            overwrite = true;
        } else if (arg == "--out" || arg.rfind("--out=", 0) == 0) {
            if (arg == "--out" && i + 1 >= args.size()) {
                throw UsageError("--out needs a directory", kTrainUsage);
            }
            out = arg == "--out" ? args[++i] : arg.substr(6);
        } else if (arg == "--resume" || arg.rfind("--resume=", 0) == 0) {
            if (arg == "--resume" && i + 1 >= args.size()) {
                throw UsageError("--resume needs a checkpoint directory", kTrainUsage);
            }
            resume = arg == "--resume" ? args[++i] : arg.substr(9);
        } else if (!arg.empty() && arg[0] == '-') {
            throw UsageError(fmt::format("unknown option '{}'", arg), kTrainUsage);
        } else if (path.empty()) {
            path = arg;
        } else {
            throw UsageError(fmt::format("unexpected argument '{}'", arg), kTrainUsage);
        }
    }
    if (path.empty()) {
        throw UsageError("train needs a CONFIG.yaml", kTrainUsage);
    }

    const Config config = load_config(path, sets);
    // The environment wins so that one run can be made verbose without editing its config.
    if (std::getenv("SHARDREC_LOG_LEVEL") == nullptr) {
        log::set_level(config.runtime.log_level);
    }
    bool restart_from_start = false;  // --resume auto without a checkpoint
    if (resume == "auto") {
        // A requeued or resubmitted job continues its own run: from the run directory's newest
        // checkpoint when it has one, from the start when it has none.
        if (out.empty()) {
            throw UsageError("--resume auto needs --out: the run directory it continues",
                             kTrainUsage);
        }
        const std::string own = config.train.checkpoint_dir.empty()
                                    ? (std::filesystem::path(out) / "checkpoints").string()
                                    : config.train.checkpoint_dir;
        resume = train::has_checkpoint(own) ? own : "";
        restart_from_start = resume.empty();
        log::root().info("--resume auto: {}",
                         resume.empty() ? "no checkpoint in " + own + ", starting from step 0"
                                        : "resuming from " + own);
    }
    const train::RunDir run_dir =
        train::open_run_dir(out, config, {resume, overwrite, restart_from_start});
    const comm::ProcessInfo& info = comm::process_info();
    // Nodes as the plan sees them (MPI's shared-memory split, or SHARDREC_LOCAL_SIZE).
    log::root().info(
        "shardrec {} ({}): {} on {} rank(s), {} node(s) of {}, run directory {} "
        "(run {})",
        version(), git_commit(), path, info.world_size, info.world_size / info.local_size,
        info.local_size, run_dir.path(), run_dir.run_id());
    log::root().info("resolved config:\n{}", dump_config(config));

    const train::TrainSummary summary = train::run(config, run_dir, resume);
    log::root().info(
        "done: {} steps, {} samples in {:.1f} s ({:.0f} samples/s)", summary.steps, summary.samples,
        summary.wall_s,
        summary.wall_s > 0 ? static_cast<double>(summary.samples) / summary.wall_s : 0.0);
    return 0;
}

}  // namespace shardrec::cli
