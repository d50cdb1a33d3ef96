// `shardrec ckpt info|export|init|import`: inspect a checkpoint, write its model as TorchRec's
// state_dict (engine/train/checkpoint_export.h), write a config's initial weights or a TorchRec
// state_dict as a step-0 checkpoint (engine/train/checkpoint_import.h). One process does the
// work; run without mpirun.
#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "comm/mpi_env.h"
#include "engine/config/config.h"
#include "engine/train/checkpoint_export.h"
#include "engine/train/checkpoint_import.h"
#include "engine/train/quantized_model.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kCkptUsage =
    "usage: shardrec ckpt info CHECKPOINT\n"
    "       shardrec ckpt export CHECKPOINT --format npy|safetensors --out DIR\n"
    "       shardrec ckpt init CONFIG.yaml --out DIR [--set KEY=VALUE ...]\n"
    "       shardrec ckpt import model.safetensors CONFIG.yaml --out DIR [--set KEY=VALUE ...]\n"
    "       shardrec ckpt quantize CHECKPOINT --out MODEL_DIR --weights TYPE [--tables "
    "T=TYPE,...]\n"
    "\n"
    "CHECKPOINT: a step-<N> directory, or the directory holding them (the newest complete one;\n"
    "            a damaged one is an error here, where eval and train --resume take the newest\n"
    "            intact one).\n"
    "\n"
    "  info     step, seed, world size, plan (every table's shards), dense parameters, files,\n"
    "           bytes, and whether every checksum holds (exit 1 when one does not)\n"
    "  export   checks every checksum, then writes the model as the state_dict of TorchRec's\n"
    "           DLRM, DLRM_DCN or SimpleDeepFMNN (load_state_dict(strict=True) takes it):\n"
    "           npy: one NAME.npy per tensor (bf16 tables as f32); safetensors: "
    "model.safetensors\n"
    "  init     writes the initial weights of CONFIG (train.seed) as DIR/step-00000000, the\n"
    "           exact weights `train` starts from; `train --resume DIR` continues from them\n"
    "  import   writes a TorchRec state_dict (safetensors, TorchRec names) as DIR/step-00000000\n"
    "           of CONFIG's model, with fresh optimizer state; every table and layer must be\n"
    "           there with CONFIG's shape\n"
    "  quantize writes the model for inference as MODEL_DIR: every table row-wise quantized\n"
    "           (TYPE: int8, int4, int2 with an fp16 scale and bias per row, FBGEMM's layout;\n"
    "           fp8 E4M3FN with an f32 scale per row; fp16; f32), --tables overriding it per\n"
    "           table, the dense parameters in f32, a manifest.yaml with every file's\n"
    "           CRC-32; `shardrec eval --model` evaluates it\n";

int ckpt_main(const std::vector<std::string>& args) {
    std::string format, out, weights, table_types;
    std::vector<std::string> positional, sets;
    bool help = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (take_set(args, i, sets, kCkptUsage))
            continue;
        if (arg == "--help" || arg == "-h") {
            help = true;
        } else if (arg == "--format" || arg == "--out" || arg == "--weights" || arg == "--tables") {
            if (i + 1 >= args.size())
                throw UsageError(fmt::format("{} needs a value", arg), kCkptUsage);
            std::string& value = arg == "--format"    ? format
                                 : arg == "--out"     ? out
                                 : arg == "--weights" ? weights
                                                      : table_types;
            value = args[++i];
        } else if (!arg.empty() && arg[0] == '-') {
            throw UsageError(fmt::format("unknown option '{}'", arg), kCkptUsage);
        } else {
            positional.push_back(arg);
        }
    }
    const std::string action = positional.empty() ? "" : positional.front();
    // The positional arguments each action takes after its name.
    const std::map<std::string, std::vector<std::string>> kOperands = {
        {"info", {"CHECKPOINT directory"}},
        {"export", {"CHECKPOINT directory"}},
        {"init", {"CONFIG.yaml"}},
        {"import", {"model.safetensors file", "CONFIG.yaml"}},
        {"quantize", {"CHECKPOINT directory"}}};
    const auto operands = kOperands.find(action);
    // --help after a subcommand that does not exist is that mistake, not a request for help.
    if (help && (action.empty() || operands != kOperands.end())) {
        if (comm::process_info().rank == 0)
            std::fputs(kCkptUsage, stdout);
        return 0;
    }
    if (operands == kOperands.end())
        throw UsageError(action.empty() ? "ckpt needs info, export, init, import or quantize"
                                        : fmt::format("unknown ckpt subcommand '{}': info, export, "
                                                      "init, import or quantize",
                                                      action),
                         kCkptUsage);
    if (positional.size() - 1 < operands->second.size()) {
        throw UsageError(
            fmt::format("ckpt {} needs a {}", action, operands->second[positional.size() - 1]),
            kCkptUsage);
    }
    if (positional.size() - 1 > operands->second.size())
        throw UsageError(fmt::format("unexpected argument '{}'", positional.back()), kCkptUsage);
    if (!sets.empty() && action != "init" && action != "import")
        throw UsageError("--set applies to ckpt init and ckpt import", kCkptUsage);
    const std::string& path = positional[1];
    if (comm::process_info().rank != 0)
        return 0;  // one process is enough
    if (action == "info") {
        const std::string text = train::checkpoint_info(path);
        std::fputs(text.c_str(), stdout);
        return text.find("checksums: ok") == std::string::npos ? 1 : 0;
    }
    if (action == "export" && format != "npy" && format != "safetensors")
        throw UsageError("ckpt export needs --format npy or --format safetensors", kCkptUsage);
    if (out.empty())
        throw UsageError("ckpt " + action + " needs --out DIR", kCkptUsage);
    if ((action == "quantize") != !weights.empty() || (!table_types.empty() && weights.empty()))
        throw UsageError("--weights TYPE (and --tables) apply to ckpt quantize, which needs them",
                         kCkptUsage);
    if (action == "quantize") {
        const train::QuantizedModel q =
            train::quantize_checkpoint(path, out, kernels::quant_type_from_name(weights),
                                       train::parse_table_types(table_types));
        int64_t f32_bytes = 0;
        for (const auto& t : q.tables)
            f32_bytes += 4 * t.num_embeddings * t.embedding_dim;
        fmt::print(
            "quantized {} (step {}) to {}: {} tables, {} table bytes (f32: {}, {:.2f}x "
            "smaller), {} dense bytes\n",
            q.source_checkpoint, q.step, out, q.tables.size(), q.table_bytes(), f32_bytes,
            static_cast<double>(f32_bytes) / static_cast<double>(q.table_bytes()), q.dense_bytes());
        return 0;
    }
    if (action == "export") {
        const auto names = train::export_checkpoint(path, format, out);
        fmt::print("exported {} tensors from {} to {} ({})\n", names.size(), path, out, format);
    } else if (action == "init") {
        const std::string dir = train::init_checkpoint(load_config(path, sets), out);
        fmt::print("wrote the initial weights of {} to {}\n", path, dir);
    } else {
        const std::string dir =
            train::import_checkpoint(path, load_config(positional[2], sets), out);
        fmt::print("imported {} into {}\n", path, dir);
    }
    return 0;
}

}  // namespace shardrec::cli
