// `shardrec ckpt info CHECKPOINT` and `shardrec ckpt export CHECKPOINT --format npy|safetensors
// --out DIR`: inspect a checkpoint, and write its model as unsharded tensors under TorchRec's
// names (engine/train/checkpoint_export.h). One process reads every shard; run without mpirun.
#include <fmt/format.h>

#include <cstdio>

#include "comm/mpi_env.h"
#include "engine/train/checkpoint_export.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kCkptUsage =
    "usage: shardrec ckpt info CHECKPOINT\n"
    "       shardrec ckpt export CHECKPOINT --format npy|safetensors --out DIR\n"
    "\n"
    "CHECKPOINT: a step-<N> directory, or the directory holding them (the newest complete one).\n"
    "\n"
    "  info     step, seed, world size, plan (every table's shards), dense parameters, files,\n"
    "           bytes, and whether every checksum holds (exit 1 when one does not)\n"
    "  export   checks every checksum, then writes the unsharded tables\n"
    "           (sparse_arch.embedding_bag_collection.embedding_bags.<table>.weight) and the\n"
    "           dense parameters (dense_arch.model._mlp.0._linear.weight, ...):\n"
    "           npy: one NAME.npy per tensor (bf16 tables as f32); safetensors: "
    "model.safetensors\n";

int ckpt_main(const std::vector<std::string>& args) {
    std::string action, path, format, out;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--help" || arg == "-h") {
            if (comm::process_info().rank == 0)
                std::fputs(kCkptUsage, stdout);
            return 0;
        }
        if (arg == "--format" || arg == "--out") {
            if (i + 1 >= args.size())
                throw UsageError(fmt::format("{} needs a value", arg), kCkptUsage);
            (arg == "--format" ? format : out) = args[++i];
        } else if (!arg.empty() && arg[0] == '-') {
            throw UsageError(fmt::format("unknown option '{}'", arg), kCkptUsage);
        } else if (action.empty()) {
            action = arg;
        } else if (path.empty()) {
            path = arg;
        } else {
            throw UsageError(fmt::format("unexpected argument '{}'", arg), kCkptUsage);
        }
    }
    if (action != "info" && action != "export")
        throw UsageError("ckpt needs info or export", kCkptUsage);
    if (path.empty())
        throw UsageError("ckpt " + action + " needs a CHECKPOINT directory", kCkptUsage);
    if (comm::process_info().rank != 0)
        return 0;  // one reader is enough
    if (action == "info") {
        const std::string text = train::checkpoint_info(path);
        std::fputs(text.c_str(), stdout);
        return text.find("checksums: ok") == std::string::npos ? 1 : 0;
    }
    if (format != "npy" && format != "safetensors")
        throw UsageError("ckpt export needs --format npy or --format safetensors", kCkptUsage);
    if (out.empty())
        throw UsageError("ckpt export needs --out DIR", kCkptUsage);
    const auto names = train::export_checkpoint(path, format, out);
    fmt::print("exported {} tensors from {} to {} ({})\n", names.size(), path, out, format);
    return 0;
}

}  // namespace shardrec::cli
