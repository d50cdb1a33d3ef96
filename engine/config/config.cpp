// The top-level config, its train/data/runtime sections, and loading, dumping and documenting.
// The model and optimizer sections live in model_config.cpp and optimizer_config.cpp.
#include "engine/config/config.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <thread>

namespace shardrec {

// ---- train ----

void TrainConfig::visit(FieldVisitor& v) {
    v.field(Field("steps",
                  "optimizer steps to run; 0 with checkpoint_every > 0 saves the initial "
                  "weights as step 0")
                .required()
                .at_least(0),
            steps);
    v.field(Field("seed", "seed of every random stream (initial weights, data)").at_least(0), seed);
    v.field(Field("log_every", "steps between train metrics lines").at_least(1), log_every);
    v.field(
        Field("eval_every", "steps between evaluations; 0: only after the last step").at_least(0),
        eval_every);
    v.field(Field("eval_samples", "held-out samples per evaluation; 0: no evaluation").at_least(0),
            eval_samples);
    v.field(Field("target_auc",
                  "stop training once an evaluation's AUC reaches it (MLPerf style); 0: never")
                .at_least(0)
                .at_most(1),
            target_auc);
    v.field(Field("pipeline",
                  "train pipeline: base (one batch at a time), sparse_dist (the input "
                  "all-to-all of the next batch overlaps this one) or prefetch_sparse_dist "
                  "(also the key_value cache fills of the next batch on a thread of their "
                  "own); the same numbers")
                .one_of({"base", "sparse_dist", "prefetch_sparse_dist"}),
            pipeline);
    v.field(Field("checkpoint_every",
                  "steps between checkpoints (also after the last step); 0: no periodic "
                  "checkpoints (a stop signal still saves its step)")
                .at_least(0),
            checkpoint_every);
    v.field(Field("checkpoint_dir", "where checkpoints go (step-<N> directories)")
                .default_doc("the run directory's checkpoints/"),
            checkpoint_dir);
    v.field(
        Field("checkpoint_keep", "how many of the newest checkpoints are kept; 0: all").at_least(0),
        checkpoint_keep);
}

void TrainConfig::resolve(ConfigNode& node) {
    if (target_auc > 0 && eval_samples == 0) {
        node.error_at("target_auc",
                      fmt::format("{} needs evaluations, but eval_samples is 0", target_auc));
    }
}

void TrainConfig::from_yaml(ConfigNode& node) {
    read_fields(node, [this](FieldVisitor& v) { visit(v); });
    resolve(node);
}

YAML::Node TrainConfig::to_yaml() const {
    TrainConfig copy = *this;
    return write_fields([&copy](FieldVisitor& v) { copy.visit(v); });
}

// ---- data ----

void DataConfig::Synthetic::visit(FieldVisitor& v) {
    v.field(Field("zipf_alpha", "Zipf exponent of the ids of each table; 0: uniform").at_least(0),
            zipf_alpha);
    v.field(Field("signal_scale", "strength of the planted signal the labels follow").at_least(0),
            signal_scale);
    v.field(Field("raw_id_drift",
                  "managed-collision tables only: raw 64-bit ids from a vocabulary that gains "
                  "one id every raw_id_drift samples (sample index of the split), the newest the "
                  "most frequent (Zipf over num_embeddings ranks), so evictions have work; 0: ids "
                  "in [0, num_embeddings) as other tables")
                .at_least(0),
            raw_id_drift);
    v.field(Field("raw_id_mod_tables",
                  "tables without managed_collision whose ids come from the same drifting raw-id "
                  "vocabulary (raw_id_drift > 0) as raw id mod num_embeddings: the hashing "
                  "baseline of a managed table; the planted signal follows the raw id"),
            raw_id_mod_tables);
    v.field(Field("raw_id_eval_offset",
                  "eval sample i draws raw ids from the vocabulary at sample raw_id_eval_offset "
                  "+ i (train.steps x the global batch: the vocabulary training ended with); 0: "
                  "the vocabulary of the first samples")
                .at_least(0),
            raw_id_eval_offset);
    v.field(Field("raw_id_vocabulary",
                  "raw-id tables: the Zipf ranks of the raw ids (the live vocabulary) whatever "
                  "the table's rows; 0: num_embeddings")
                .at_least(0),
            raw_id_vocabulary);
}

void DataConfig::CriteoBinary::visit(FieldVisitor& v) {
    v.field(Field("path", "directory written by `shardrec data criteo-preprocess`").required(),
            path);
    v.field(Field("eval_days", "the last N input files (days) are the eval split").at_least(0),
            eval_days);
    v.field(
        Field("eval_fraction", "when > 0: the last fraction of the rows is the eval split instead")
            .at_least(0)
            .less_than(1),
        eval_fraction);
}

void DataConfig::visit(FieldVisitor& v) {
    v.field(Field("type", "where samples come from").one_of({"synthetic", "criteo_binary"}), type);
    v.field(Field("batch_size", "samples per step on each rank").required().at_least(1),
            batch_size);
    v.section(Field("synthetic", "the synthetic generator")
                  .only_if(type == "synthetic", "data.type is synthetic"),
              [this](FieldVisitor& s) { synthetic.visit(s); });
    v.section(Field("criteo_binary", "preprocessed Criteo shards")
                  .only_if(type == "criteo_binary", "data.type is criteo_binary"),
              [this](FieldVisitor& s) { criteo_binary.visit(s); });
}

void DataConfig::from_yaml(ConfigNode& node) {
    read_fields(node, [this](FieldVisitor& v) { visit(v); });
}

void DataConfig::resolve(ConfigNode& node, const TrainConfig& train) {
    // Found here, not after the last training step when the first evaluation would run.
    if (type == "criteo_binary" && train.eval_samples > 0 && criteo_binary.eval_days == 0 &&
        criteo_binary.eval_fraction == 0) {
        ConfigNode criteo = node.child("criteo_binary");
        criteo.error_at(
            "eval_days",
            fmt::format("0 with eval_fraction 0 leaves no eval split, but train.eval_samples is "
                        "{}; set eval_days or eval_fraction, or train.eval_samples: 0",
                        train.eval_samples));
    }
}

YAML::Node DataConfig::to_yaml() const {
    DataConfig copy = *this;
    return write_fields([&copy](FieldVisitor& v) { copy.visit(v); });
}

// ---- runtime ----

int64_t usable_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        return std::max(1, CPU_COUNT(&set));
    }
    return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

void RuntimeConfig::visit(FieldVisitor& v) {
    v.field(Field("device", "cpu, cuda (the node-local rank's GPU) or cuda:N"), device);
    v.field(Field("log_level", "log level (SHARDREC_LOG_LEVEL overrides it)")
                .one_of({"trace", "debug", "info", "warn", "error", "off"}),
            log_level);
    v.field(Field("threads",
                  "CPU threads per rank, at most the CPUs the process may run on (its affinity "
                  "mask: taskset, srun --cpus-per-task); 0: OMP_NUM_THREADS, else those CPUs "
                  "(a rank bound to none: the node's CPUs over its ranks)")
                .at_least(0),
            threads);
    v.removed("deterministic",
              "removed, as there is nothing to choose: every kernel is bitwise deterministic "
              "(CPU reductions never span threads; CUDA sorts ids and reduces each row's segment "
              "in order, with no float atomics); delete the line");
    v.field(Field("bounds_check",
                  "ids outside a table (TorchRec BoundsCheckMode): fatal stops naming table, "
                  "feature, sample and id; warning counts, logs the first 10 and reads row 0 "
                  "instead; ignore reads row 0 silently")
                .one_of({"fatal", "warning", "ignore"}),
            bounds_check);
    v.field(Field("nan_policy",
                  "NaN or Inf in dense features, labels or the loss: stop the run, or skip the "
                  "batch on every rank (no parameter changes)")
                .one_of({"stop", "skip_batch"}),
            nan_policy);
    v.field(Field("comm_timeout_s",
                  "seconds a collective may wait for a peer before the run fails; 0: no limit "
                  "(SHARDREC_COMM_TIMEOUT_S overrides it)")
                .at_least(0),
            comm_timeout_s);
    v.field(Field("gemm_math",
                  "math of the GEMMs (MLP, cross nets): f32; bf16 operands with f32 accumulation "
                  "(CUDA tensor cores; on the CPU oneDNN on AMX or AVX512-BF16, or without "
                  "AVX-512 OpenBLAS sgemm on the rounded operands; f32 weights kept for the "
                  "optimizer); tf32 tensor cores (CUDA only)")
                .one_of({"f32", "tf32", "bf16"}),
            gemm_math);
    v.field(Field("hot_row_update",
                  "how the CUDA embedding backward sums a row with many ids in a batch (Zipf "
                  "ids): chunked (chunks of 256 ids on blocks of their own, added in order); "
                  "block (one block per row, the earlier kernel, kept to compare). The CPU "
                  "ignores it")
                .one_of({"chunked", "block"}),
            hot_row_update);
}

void RuntimeConfig::resolve(ConfigNode& node) {
    const bool cpu_or_cuda = device == "cpu" || device == "cuda";
    bool cuda_n = device.size() > 5 && device.compare(0, 5, "cuda:") == 0;
    for (size_t i = 5; cuda_n && i < device.size(); ++i) {
        cuda_n = std::isdigit(static_cast<unsigned char>(device[i])) != 0;
    }
    if (!cpu_or_cuda && !cuda_n) {
        node.error_at("device", fmt::format("expected cpu, cuda or cuda:N, got '{}'", device));
    }
    if (device == "cpu" && gemm_math == "tf32") {
        node.error_at("gemm_math",
                      "tf32 is a CUDA tensor-core math; on the CPU use f32 or bf16 (oneDNN)");
    }
    // More threads than CPUs only oversubscribes them, and far more fail inside the OpenMP
    // runtime (a crash at 100000, a hang at 30000) instead of here.
    const int64_t cpus = usable_cpus();
    if (threads > cpus) {
        node.error_at("threads",
                      fmt::format("{} threads exceed the {} CPUs this process may run on "
                                  "(sched_getaffinity); use at most {}, or 0 for all of them",
                                  threads, cpus, cpus));
    }
}

void RuntimeConfig::from_yaml(ConfigNode& node) {
    read_fields(node, [this](FieldVisitor& v) { visit(v); });
    resolve(node);
}

YAML::Node RuntimeConfig::to_yaml() const {
    RuntimeConfig copy = *this;
    return write_fields([&copy](FieldVisitor& v) { copy.visit(v); });
}

// ---- comm ----

void CommConfig::QComms::visit(FieldVisitor& v) {
    v.field(Field("forward",
                  "precision of the pooled embeddings the output dists send (all-to-all, "
                  "reduce-scatter, all-gather): fp16 and bf16 round to nearest even, fp8 is E4M3 "
                  "with one f32 scale per sample and rank block; decoded to f32, summed in f32")
                .one_of({"fp32", "fp16", "bf16", "fp8"}),
            forward);
    v.field(Field("backward", "precision of the gradients the output dists' backward sends back")
                .one_of({"fp32", "fp16", "bf16", "fp8"}),
            backward);
}

void CommConfig::visit(FieldVisitor& v) {
    v.section(Field("qcomms", "quantized pooled-embedding collectives (TorchRec QCommsConfig)"),
              [this](FieldVisitor& s) { qcomms.visit(s); });
    v.field(Field("allreduce_precision",
                  "precision of the dense gradients in the trainer's all-reduce: fp16 or bf16 "
                  "values on the wire, summed and averaged in f32")
                .one_of({"fp32", "fp16", "bf16"}),
            allreduce_precision);
    v.field(Field("hierarchical",
                  "output dists of row-sharded tables (row_wise, table_row_wise) in two steps: "
                  "partial sums added inside a node, then one exchange per node pair (fewer "
                  "bytes across nodes); auto: on with more than one node where rows are split "
                  "inside a node")
                .one_of({"auto", "true", "false"}),
            hierarchical);
}

// ---- top level ----

void Config::visit(FieldVisitor& v) {
    v.section(
        Field("train", "the training loop"), [this](FieldVisitor& s) { train.visit(s); },
        [this](ConfigNode& n) { train.resolve(n); });
    v.section(
        Field("data", "the input data"), [this](FieldVisitor& s) { data.visit(s); },
        [this](ConfigNode& n) { data.resolve(n, train); });
    v.section(
        Field("model", "the model"), [this](FieldVisitor& s) { model.visit(s); },
        [this](ConfigNode& n) { model.resolve(n); });
    v.section(Field("optimizer", "dense and sparse (embedding) optimizers"),
              [this](FieldVisitor& s) { optimizer.visit(s); });
    v.section(
        Field("runtime", "devices, threads and logging"),
        [this](FieldVisitor& s) { runtime.visit(s); },
        [this](ConfigNode& n) { runtime.resolve(n); });
    v.section(
        Field("sharding", "how embedding tables are split over ranks"),
        [this](FieldVisitor& s) { sharding.visit(s); },
        [this](ConfigNode& n) { sharding.resolve(n, model, runtime, train); });
    v.section(Field("comm", "the precision of the values collectives send"),
              [this](FieldVisitor& s) { comm.visit(s); });
}

void Config::from_yaml(ConfigNode& node) {
    read_fields(node, [this](FieldVisitor& v) { visit(v); });
}

YAML::Node Config::to_yaml() const {
    Config copy = *this;
    return write_fields([&copy](FieldVisitor& v) { copy.visit(v); });
}

namespace {

Config read_document(ConfigDocument& doc, const std::vector<std::string>& overrides) {
    doc.apply_overrides(overrides);
    Config config;
    config.source_file = doc.source_name();
    ConfigNode root = doc.root();
    config.from_yaml(root);
    doc.throw_if_errors();
    return config;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
    ConfigDocument doc = ConfigDocument::parse_file(path);
    return read_document(doc, overrides);
}

Config parse_config(const std::string& text,
                    const std::vector<std::string>& overrides,
                    const std::string& source_name) {
    ConfigDocument doc = ConfigDocument::parse_string(text, source_name);
    return read_document(doc, overrides);
}

std::string dump_config(const Config& config) {
    YAML::Emitter out;
    out << config.to_yaml();
    std::string text =
        config.source_file.empty()
            ? std::string("# shardrec resolved config\n")
            : fmt::format("# shardrec resolved config (from {})\n", config.source_file);
    return text + out.c_str() + "\n";
}

std::string config_reference() {
    Config scratch;  // the documenter may add a default element to lists
    return format_field_docs(
        document_fields("", [&scratch](FieldVisitor& v) { scratch.visit(v); }));
}

}  // namespace shardrec
