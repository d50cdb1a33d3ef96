// `shardrec <subcommand>`: the one entry point. Library code throws shardrec::Error; this is the
// only place that decides how a process dies (log on the failing rank, then MPI_Abort so that no
// peer is left blocked in a collective).
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "comm/mpi_env.h"
#include "comm/stop_signal.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kMainUsage =
    "usage: shardrec <command> [args]\n"
    "\n"
    "commands:\n"
    "  train CONFIG.yaml [--out DIR] [--set KEY=VALUE ...]   train a model\n"
    "        [--resume CHECKPOINT] [--overwrite]              continue a run, replace one\n"
    "  eval CONFIG.yaml --checkpoint DIR [--predictions F]   evaluate a checkpoint: AUC, NE, ...\n"
    "       (or --model MODEL_DIR)                           ... or a quantized model\n"
    "  predict MODEL_DIR --data synthetic|PATH --out F.csv   score samples with a quantized model\n"
    "  serve MODEL_DIR --port P [--threads T]                score requests over HTTP\n"
    "  validate CONFIG.yaml [--set KEY=VALUE ...]            check a config, print it resolved\n"
    "  validate --reference                                  print every config key\n"
    "  bench CONFIG.yaml [--steps N] [--json FILE]           time training steps of a config\n"
    "  plan CONFIG.yaml --world-size N [--out PLAN.yaml]     shard the tables, predict step time\n"
    "  data criteo-preprocess --in FILE... --out DIR         Criteo TSV to binary shards\n"
    "  ckpt info CHECKPOINT                                  what a checkpoint holds\n"
    "  ckpt export CHECKPOINT --format npy|safetensors --out DIR   TorchRec's state_dict\n"
    "  ckpt init CONFIG.yaml --out DIR                       the initial weights, as step 0\n"
    "  ckpt import model.safetensors CONFIG.yaml --out DIR   a TorchRec state_dict, as step 0\n"
    "  ckpt quantize CHECKPOINT --out DIR --weights int8     a model for predict and serve\n"
    "\n"
    "options:\n"
    "  --version    version, commit, backends and library versions\n"
    "  --help, -h   this text; `shardrec <command> --help` for a command's\n"
    "\n"
    "Launch several ranks with mpirun: mpirun -np 2 shardrec train configs/quickstart.yaml\n";

bool take_set(const std::vector<std::string>& args,
              size_t& i,
              std::vector<std::string>& sets,
              const char* usage) {
    const std::string& arg = args[i];
    if (arg.rfind("--set=", 0) == 0) {
        sets.push_back(arg.substr(6));
        return true;
    }
    if (arg != "--set") {
        return false;
    }
    if (i + 1 >= args.size()) {
        throw UsageError("--set needs KEY=VALUE", usage);
    }
    sets.push_back(args[++i]);
    return true;
}

int64_t parse_positive(const std::string& option, const std::string& text, const char* usage) {
    size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || value < 1)
        throw UsageError(fmt::format("{} needs a positive integer, got '{}'", option, text), usage);
    return value;
}

void check_output_file(const std::string& option, const std::string& path) {
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty())
        dir = ".";
    std::error_code ec;
    SR_CHECK(std::filesystem::is_directory(dir, ec), "{} '{}': directory '{}' does not exist",
             option, path, dir.string());
    SR_CHECK(::access(dir.c_str(), W_OK) == 0, "{} '{}': directory '{}' is not writable: {}",
             option, path, dir.string(), std::strerror(errno));
    SR_CHECK(!std::filesystem::is_directory(path, ec), "{} '{}' is a directory", option, path);
}

namespace {

int dispatch(const std::vector<std::string>& args) {
    if (args.empty()) {
        throw UsageError("no command given", kMainUsage);
    }
    const std::string& command = args[0];
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (command == "--help" || command == "-h" || command == "help") {
        if (comm::process_info().rank == 0) {
            std::fputs(kMainUsage, stdout);
        }
        return 0;
    }
    if (command == "--version" || command == "version") {
        return version_main();
    }
    if (command == "train") {
        return train_main(rest);
    }
    if (command == "eval") {
        return eval_main(rest);
    }
    if (command == "predict") {
        return predict_main(rest);
    }
    if (command == "serve") {
        return serve_main(rest);
    }
    if (command == "validate") {
        return validate_main(rest);
    }
    if (command == "bench") {
        return bench_main(rest);
    }
    if (command == "plan") {
        return plan_main(rest);
    }
    if (command == "ckpt") {
        return ckpt_main(rest);
    }
    if (command == "data") {
        return data_main(rest);
    }
    throw UsageError(fmt::format("unknown command '{}'", command), kMainUsage);
}

// Logs on the failing rank, then takes every rank down: a lone exit would leave peers waiting.
int fail(const std::string& message) {
    log::all().error("{}", message);
    if (comm::process_info().world_size > 1) {
        comm::abort_process(1);
    }
    return 1;
}

}  // namespace
}  // namespace shardrec::cli

int main(int argc, char** argv) {
    using namespace shardrec;
    int rc = 0;
    try {
        comm::init_process(&argc, &argv);
        const std::vector<std::string> args(argv + 1, argv + argc);
        rc = cli::dispatch(args);
    } catch (const comm::StopRequested& e) {
        // Every rank agreed to stop at the same step: no abort is needed, each ends cleanly. Each
        // says so itself: mpirun, which is ending the job, may kill a rank (and drop its output)
        // once another has exited.
        log::all().error("{}", e.what());
        rc = 128 + e.signal();
    } catch (const cli::UsageError& e) {
        if (comm::process_info().rank == 0) {
            fmt::print(stderr, "shardrec: {}\n\n{}", e.what(), e.usage());
        }
        rc = 2;
    } catch (const Error& e) {
        rc = cli::fail(e.what());
    } catch (const std::bad_alloc&) {
        rc = cli::fail(fmt::format(
            "{}: out of host memory (std::bad_alloc) beyond what the run planned; use smaller "
            "tables, a smaller data.batch_size or more ranks",
            error_context()));
    } catch (const std::exception& e) {
        rc = cli::fail(fmt::format("{}: {}", error_context(), e.what()));
    }
    comm::finalize_process();
    return rc;
}
