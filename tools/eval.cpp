// `shardrec eval CONFIG.yaml --checkpoint DIR [--predictions FILE] [--set K=V ...]`: loads a
// checkpoint into the model CONFIG describes (any world size and plan), evaluates it on the
// eval split as training does (train.eval_samples) and prints the global metrics as one JSON line
// on rank 0. --predictions writes every evaluated sample's label and score (the predicted click
// probability) in eval-sample order; rank 0 gathers them and writes FILE.tmp, then renames it.
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "comm/mpi_env.h"
#include "engine/config/config.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/train/checkpoint.h"
#include "engine/train/quantized_model.h"
#include "engine/train/run_dir.h"
#include "engine/train/trainer.h"
#include "kernels/linear.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kEvalUsage =
    "usage: shardrec eval CONFIG.yaml --checkpoint DIR [--predictions FILE] [--set KEY=VALUE ...]\n"
    "       shardrec eval CONFIG.yaml --model MODEL_DIR [--checkpoint DIR] [--set KEY=VALUE ...]\n"
    "\n"
    "Evaluates a checkpoint on the eval split of CONFIG.yaml (train.eval_samples samples, rounded\n"
    "up to whole global batches); run several ranks with mpirun -np N (any N, any plan).\n"
    "Prints one JSON line: {\"kind\":\"eval\",\"step\":N,\"loss\":L,\"auc\":A,\"ne\":E,\n"
    "\"accuracy\":C,\"calibration\":K,\"count\":S,\"checkpoint\":\"DIR\"}.\n"
    "\n"
    "  --checkpoint DIR    a step-<N> checkpoint, or a directory of them (the newest intact:\n"
    "                      a damaged one is skipped with a warning, as --resume does)\n"
    "  --predictions FILE  write 'label,score' per evaluated sample, in order (score: the\n"
    "                      predicted probability); written to FILE.tmp, then renamed\n"
    "  --set KEY=VALUE     override one config key, e.g. --set train.eval_samples=100000\n"
    "  --model MODEL_DIR   evaluate a quantized model (shardrec ckpt quantize) next to the f32\n"
    "                      checkpoint it came from (or --checkpoint DIR) on the same samples:\n"
    "                      prints both, then one JSON line {\"kind\":\"eval_quantized\",\n"
    "                      \"auc\":A,\"ne\":E,\"calibration\":K,\"f32_auc\":...,\"bytes\":Q,\n"
    "                      \"f32_bytes\":F,...}\n";

namespace {

void write_predictions(const std::string& path, const train::MetricsAccumulator& samples) {
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    SR_CHECK(f != nullptr, "cannot create '{}': {}", tmp, std::strerror(errno));
    bool ok = std::fputs("label,score\n", f) >= 0;
    const std::vector<float>& logits = samples.logits();
    const std::vector<float>& labels = samples.labels();
    for (size_t i = 0; i < logits.size() && ok; ++i) {
        const double score = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[i])));
        ok = std::fprintf(f, "%g,%.9g\n", static_cast<double>(labels[i]), score) > 0;
    }
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) {
        std::remove(tmp.c_str());
    }
    SR_CHECK(ok, "cannot write '{}': {}", tmp, std::strerror(errno));
    std::filesystem::rename(tmp, path);
}

// `eval --model`: the quantized model and, when its f32 checkpoint is there, that checkpoint on
// the same eval samples (the eval split is fixed by the config, so both see the same data).
int eval_quantized(const Config& config, const std::string& model_dir, std::string checkpoint) {
    const train::QuantizedModel model = train::read_quantized_model(model_dir);
    // A --checkpoint given is wanted: one that is not there is an error, not a skipped column.
    SR_CHECK(checkpoint.empty() || train::has_checkpoint(checkpoint),
             "--checkpoint '{}': no checkpoint there to compare the quantized model with",
             checkpoint);
    if (checkpoint.empty())
        checkpoint = model.source_checkpoint;
    train::Trainer trainer(config, train::default_process_group());
    std::optional<train::Metrics> f32;
    if (train::has_checkpoint(checkpoint)) {
        train::load_checkpoint(trainer, checkpoint);
        f32 = trainer.evaluate();
    } else {
        log::root().warn(
            "the model's f32 checkpoint '{}' is gone: no f32 metrics to compare with; pass "
            "--checkpoint DIR",
            checkpoint);
    }
    train::load_quantized_model(trainer, model);
    const train::Metrics q = trainer.evaluate();
    int64_t f32_bytes = model.dense_bytes();
    std::string types;
    for (const auto& t : model.tables) {
        f32_bytes += 4 * t.num_embeddings * t.embedding_dim;
        types += fmt::format("{}{}={}", types.empty() ? "" : ",", t.name,
                             kernels::quant_type_name(t.type));
    }
    const int64_t bytes = model.table_bytes() + model.dense_bytes();
    if (comm::process_info().rank != 0)
        return 0;
    auto num = [](double v) { return train::json_number(v); };
    // The checkpoint's row, then the model's (its weights' type).
    fmt::print("{:<18} {:>10} {:>10} {:>12} {:>14}\n", "", "auc", "ne", "calibration", "bytes");
    if (f32)
        fmt::print("{:<18} {:>10.6f} {:>10.6f} {:>12.6f} {:>14}\n", "checkpoint (f32)", f32->auc,
                   f32->ne, f32->calibration, f32_bytes);
    fmt::print("{:<18} {:>10.6f} {:>10.6f} {:>12.6f} {:>14}\n",
               fmt::format("model ({})", kernels::quant_type_name(model.weights)), q.auc, q.ne,
               q.calibration, bytes);
    const double nan = std::nan("");
    fmt::print(R"({{"kind":"eval_quantized","step":{},"auc":{},"ne":{},"calibration":{},)"
               R"("loss":{},"count":{},"f32_auc":{},"f32_ne":{},"f32_calibration":{},)"
               R"("bytes":{},"f32_bytes":{},"weights":"{}","tables":"{}","model":"{}"}})"
               "\n",
               model.step, num(q.auc), num(q.ne), num(q.calibration), num(q.loss), q.count,
               num(f32 ? f32->auc : nan), num(f32 ? f32->ne : nan),
               num(f32 ? f32->calibration : nan), bytes, f32_bytes,
               kernels::quant_type_name(model.weights), types, model_dir);
    std::fflush(stdout);
    return 0;
}

}  // namespace

int eval_main(const std::vector<std::string>& args) {
    std::string path;
    std::string checkpoint;
    std::string predictions;
    std::string model_dir;
    std::vector<std::string> sets;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (take_set(args, i, sets, kEvalUsage)) {
            continue;
        }
        if (arg == "--help" || arg == "-h") {
            if (comm::process_info().rank == 0) {
                std::fputs(kEvalUsage, stdout);
            }
            return 0;
        }
        if (arg == "--checkpoint" || arg == "--predictions" || arg == "--model") {
            if (i + 1 >= args.size()) {
                throw UsageError(fmt::format("{} needs a value", arg), kEvalUsage);
            }
            (arg == "--checkpoint" ? checkpoint
             : arg == "--model"    ? model_dir
                                   : predictions) = args[++i];
        } else if (!arg.empty() && arg[0] == '-') {
            throw UsageError(fmt::format("unknown option '{}'", arg), kEvalUsage);
        } else if (path.empty()) {
            path = arg;
        } else {
            throw UsageError(fmt::format("unexpected argument '{}'", arg), kEvalUsage);
        }
    }
    if (path.empty()) {
        throw UsageError("eval needs a CONFIG.yaml", kEvalUsage);
    }
    if (checkpoint.empty() && model_dir.empty()) {
        throw UsageError("eval needs --checkpoint DIR or --model MODEL_DIR", kEvalUsage);
    }
    if (!model_dir.empty() && !predictions.empty()) {
        throw UsageError("--predictions applies to a checkpoint, not to --model", kEvalUsage);
    }

    const Config config = load_config(path, sets);
    if (std::getenv("SHARDREC_LOG_LEVEL") == nullptr) {
        log::set_level(config.runtime.log_level);
    }
    SR_CHECK(config.train.eval_samples > 0,
             "nothing to evaluate: train.eval_samples is 0 (set it to the samples to evaluate)");
    if (!predictions.empty())
        check_output_file("--predictions", predictions);
    train::configure_threads(config);
    kernels::set_row_invariant_gemms(true);  // the scores of predict, whatever batch and threads
    if (!model_dir.empty()) {
        return eval_quantized(config, model_dir, checkpoint);
    }
    train::Trainer trainer(config, train::default_process_group());
    std::string resolved;  // a directory of checkpoints: the newest intact one, as a resume
    train::LoadOptions load;
    load.taken = &resolved;
    const int64_t step = train::load_checkpoint(trainer, checkpoint, load);
    log::root().info("evaluating {} (step {}) on {} rank(s)", resolved, step,
                     comm::process_info().world_size);
    train::MetricsAccumulator samples;
    const train::Metrics m = trainer.evaluate(predictions.empty() ? nullptr : &samples);
    if (comm::process_info().rank == 0) {
        if (!predictions.empty()) {
            write_predictions(predictions, samples);
        }
        fmt::print(R"({{"kind":"eval","step":{},"loss":{},"auc":{},"ne":{},"accuracy":{},)"
                   R"("calibration":{},"count":{},"checkpoint":"{}"}})"
                   "\n",
                   step, train::json_number(m.loss), train::json_number(m.auc),
                   train::json_number(m.ne), train::json_number(m.accuracy),
                   train::json_number(m.calibration), m.count, resolved);
        std::fflush(stdout);
    }
    return 0;
}

}  // namespace shardrec::cli
