// Every key of `shardrec validate --reference` changes what a run does: set to another value
// than the baseline's, a two-step in-process run (train::run into a scratch run directory) ends
// differently - its losses and metrics (metrics.jsonl), the parameters and optimizer state it
// checkpoints, the files it writes, or the error it stops with. The few keys that cannot show in
// such a run are listed in kNoRunEffect with the reason and the test that covers them instead. A
// new key without an entry, or an entry for a key that is gone, fails the test.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "comm/mpi_env.h"
#include "engine/core/error.h"
#include "engine/train/run_dir.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using namespace shardrec;
namespace fs = std::filesystem;

namespace {

// Small enough for a two-step run in milliseconds; checkpoints after step 2 hold every parameter
// and optimizer state, and log_every 1 writes every step's loss and learning rate.
const char* const kBase = R"(
train: {steps: 2, seed: 3, log_every: 1, eval_samples: 64, checkpoint_every: 2}
data: {type: synthetic, batch_size: 16}
model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  tables:
    - {name: a, num_embeddings: 50, pooling_factor: 2}
    - {name: b, num_embeddings: 30}
)";

// A key that changes a run: `context` is set in both runs (where the key only acts beside
// another setting: beta1 under adam), `variant` only in the second ({tmp}: a scratch directory).
// The variant run must train, unless `refused`: then it must fail naming the key.
struct Variant {
    Variant(std::vector<std::string> variant_,
            std::vector<std::string> context_ = {},
            bool refused_ = false)
        : variant(std::move(variant_)), context(std::move(context_)), refused(refused_) {}

    std::vector<std::string> variant;
    std::vector<std::string> context;
    bool refused = false;
};

// Table b managed with 10 slots and 20 residual rows, raw ids from a vocabulary that gains an id
// every 4 samples: the managed-collision keys act on it.
const std::vector<std::string> kMcContext = {"model.tables[1].managed_collision.zch_size=10",
                                             "model.tables[1].managed_collision.mch_size=20",
                                             "data.synthetic.raw_id_drift=4"};

// Table b managed under distance_lfu, a new id every sample: the eviction passes of the two
// steps rank ids whose order the decay exponent changes.
const std::vector<std::string> kMcDistanceLfu = {
    "model.tables[1].managed_collision.zch_size=10",
    "model.tables[1].managed_collision.mch_size=20", "data.synthetic.raw_id_drift=1",
    "model.tables[1].managed_collision.eviction_policy=distance_lfu"};

const std::map<std::string, Variant>& run_effects() {
    static const std::map<std::string, Variant> v = {
        {"train.steps", {{"train.steps=3"}}},
        {"train.seed", {{"train.seed=4"}}},
        {"train.log_every", {{"train.log_every=2"}}},
        {"train.eval_every", {{"train.eval_every=1"}}},
        {"train.eval_samples", {{"train.eval_samples=32"}}},
        {"train.target_auc", {{"train.target_auc=0.01"}, {"train.eval_every=1"}}},
        {"train.checkpoint_every", {{"train.checkpoint_every=1"}}},
        {"train.checkpoint_dir", {{"train.checkpoint_dir={tmp}/elsewhere"}}},
        {"train.checkpoint_keep", {{"train.checkpoint_keep=1"}, {"train.checkpoint_every=1"}}},
        {"data.batch_size", {{"data.batch_size=8"}}},
        {"data.synthetic.zipf_alpha", {{"data.synthetic.zipf_alpha=0.5"}}},
        {"data.synthetic.signal_scale", {{"data.synthetic.signal_scale=3.0"}}},
        {"model.type", {{"model.type=deepfm", "model.deepfm.hidden=[4]"}}},
        {"model.dense_in_features", {{"model.dense_in_features=5"}}},
        // The tables take their dim from it; the bottom MLP must end at that dim.
        {"model.embedding_dim", {{"model.embedding_dim=8", "model.bottom_mlp=[8, 8]"}}},
        {"model.tables[].name", {{"model.tables[1].name=c"}}},
        {"model.tables[].num_embeddings", {{"model.tables[1].num_embeddings=40"}}},
        // Every model needs one dim for all tables, which the bottom MLP ends at.
        {"model.tables[].embedding_dim",
         {{"model.tables[0].embedding_dim=8", "model.tables[1].embedding_dim=8",
           "model.bottom_mlp=[8, 8]"}}},
        {"model.tables[].feature_names", {{"model.tables[1].feature_names=[x, y]"}}},
        {"model.tables[].pooling", {{"model.tables[0].pooling=mean"}}},
        {"model.tables[].pooling_factor", {{"model.tables[0].pooling_factor=4"}}},
        {"model.tables[].data_type", {{"model.tables[0].data_type=bf16"}}},
        {"model.tables[].weighted", {{"model.tables[0].weighted=true"}}},
        {"model.tables[].position_weights", {{"model.tables[0].position_weights=64"}}},
        {"model.bottom_mlp", {{"model.bottom_mlp=[6, 4]"}}},
        {"model.top_mlp", {{"model.top_mlp=[4, 1]"}}},
        {"model.dcn.num_layers",
         {{"model.dcn.num_layers=1"}, {"model.type=dlrm_dcn", "model.dcn.low_rank=2"}}},
        {"model.dcn.low_rank", {{"model.dcn.low_rank=3"}, {"model.type=dlrm_dcn"}}},
        {"model.deepfm.hidden", {{"model.deepfm.hidden=[6]"}, {"model.type=deepfm"}}},
        {"optimizer.dense.type", {{"optimizer.dense.type=adagrad"}}},
        {"optimizer.dense.learning_rate", {{"optimizer.dense.learning_rate=0.2"}}},
        {"optimizer.dense.eps", {{"optimizer.dense.eps=0.5"}, {"optimizer.dense.type=adagrad"}}},
        {"optimizer.dense.beta1", {{"optimizer.dense.beta1=0.5"}, {"optimizer.dense.type=adam"}}},
        {"optimizer.dense.beta2", {{"optimizer.dense.beta2=0.5"}, {"optimizer.dense.type=adam"}}},
        {"optimizer.dense.weight_decay", {{"optimizer.dense.weight_decay=0.5"}}},
        {"optimizer.dense.initial_accumulator_value",
         {{"optimizer.dense.initial_accumulator_value=2.0"}, {"optimizer.dense.type=adagrad"}}},
        {"optimizer.dense.warmup_steps", {{"optimizer.dense.warmup_steps=2"}}},
        {"optimizer.dense.decay_start_step",
         {{"optimizer.dense.decay_start_step=1"}, {"optimizer.dense.decay_steps=4"}}},
        {"optimizer.dense.decay_steps", {{"optimizer.dense.decay_steps=1"}}},
        {"optimizer.dense.decay_power",
         {{"optimizer.dense.decay_power=1.0"}, {"optimizer.dense.decay_steps=3"}}},
        {"optimizer.dense.end_lr_factor",
         {{"optimizer.dense.end_lr_factor=0.5"}, {"optimizer.dense.decay_steps=1"}}},
        {"optimizer.sparse.type", {{"optimizer.sparse.type=rowwise_adagrad"}}},
        {"optimizer.sparse.learning_rate", {{"optimizer.sparse.learning_rate=0.2"}}},
        {"optimizer.sparse.eps",
         {{"optimizer.sparse.eps=0.5"}, {"optimizer.sparse.type=rowwise_adagrad"}}},
        {"optimizer.sparse.beta1",
         {{"optimizer.sparse.beta1=0.5"}, {"optimizer.sparse.type=adam"}}},
        {"optimizer.sparse.beta2",
         {{"optimizer.sparse.beta2=0.5"}, {"optimizer.sparse.type=adam"}}},
        {"optimizer.sparse.weight_decay", {{"optimizer.sparse.weight_decay=0.5"}}},
        {"optimizer.sparse.initial_accumulator_value",
         {{"optimizer.sparse.initial_accumulator_value=2.0"},
          {"optimizer.sparse.type=rowwise_adagrad"}}},
        // A learning rate that overflows the logits: stop ends the run with an error, skip_batch
        // skips the batch and goes on.
        {"runtime.nan_policy",
         {{"runtime.nan_policy=skip_batch"}, {"optimizer.dense.learning_rate=1e38"}}},
        {"runtime.gemm_math", {{"runtime.gemm_math=bf16"}}},
        // Refused on any type but data_parallel (the only other value, so the only change).
        {"sharding.compute_kernel", {{"sharding.compute_kernel=dense"}, {}, true}},
        {"sharding.tables[].compute_kernel",
         {{"sharding.tables=[{name: a, compute_kernel: dense}]"}, {}, true}},
        // The cache never changes the numbers; its hits and misses (metrics.jsonl) show it.
        {"sharding.cache.load_factor",
         {{"sharding.cache.load_factor=0.9"},
          {"sharding.compute_kernel=key_value", "sharding.storage.path={tmp}/kv"}}},
        {"sharding.cache.algorithm",
         {{"sharding.cache.algorithm=lfu"},
          {"sharding.compute_kernel=key_value", "sharding.storage.path={tmp}/kv",
           "sharding.cache.load_factor=0.5", "train.steps=4"}}},
        {"sharding.cache.precision",
         {{"sharding.cache.precision=bf16"},
          {"sharding.compute_kernel=key_value", "sharding.storage.path={tmp}/kv"}}},
        {"sharding.tables[].cache.precision",
         {{"sharding.tables=[{name: a, cache: {precision: bf16}}]"},
          {"sharding.compute_kernel=key_value", "sharding.storage.path={tmp}/kv"}}},
        {"sharding.tables[].cache.load_factor",
         {{"sharding.tables=[{name: a, cache: {load_factor: 0.9}}]"},
          {"sharding.compute_kernel=key_value", "sharding.storage.path={tmp}/kv"}}},
        {"sharding.tables[].cache.algorithm",
         {{"sharding.tables=[{name: a, cache: {algorithm: lfu}}]"},
          {"sharding.compute_kernel=key_value", "sharding.storage.path={tmp}/kv",
           "sharding.cache.load_factor=0.5", "train.steps=4"}}},
        // Table b (30 rows) managed: its ids go through the remap (ManagedCollisionTables);
        // with 10 slots and a drifting raw vocabulary every step evicts.
        {"model.tables[].managed_collision.zch_size",
         {{"model.tables[1].managed_collision.zch_size=30"}}},
        {"model.tables[].managed_collision.eviction_policy",
         {{"model.tables[1].managed_collision.eviction_policy=lru"}, kMcContext}},
        {"model.tables[].managed_collision.decay_exponent",
         {{"model.tables[1].managed_collision.decay_exponent=4"}, kMcDistanceLfu}},
        {"model.tables[].managed_collision.eviction_interval",
         {{"model.tables[1].managed_collision.eviction_interval=2"}, kMcContext}},
        {"model.tables[].managed_collision.threshold",
         {{"model.tables[1].managed_collision.threshold=probabilistic:0.5"}, kMcContext}},
        {"model.tables[].managed_collision.input_hash_size",
         {{"model.tables[1].managed_collision.input_hash_size=7"}, kMcContext}},
        {"model.tables[].managed_collision.mch_size",
         {{"model.tables[1].managed_collision.zch_size=20",
           "model.tables[1].managed_collision.mch_size=10"},
          kMcContext}},
        {"model.tables[].managed_collision.total_num_buckets",
         {{"model.tables[1].managed_collision.total_num_buckets=2"}, kMcContext}},
        {"data.synthetic.raw_id_drift", {{"data.synthetic.raw_id_drift=1"}, kMcContext}},
        // Table a (plain) fed the drifting raw ids mod its 50 rows.
        {"data.synthetic.raw_id_mod_tables",
         {{"data.synthetic.raw_id_mod_tables=[a]"}, {"data.synthetic.raw_id_drift=4"}}},
        {"data.synthetic.raw_id_eval_offset",
         {{"data.synthetic.raw_id_eval_offset=1000"}, kMcContext}},
        {"data.synthetic.raw_id_vocabulary",
         {{"data.synthetic.raw_id_vocabulary=1000"}, kMcContext}},
        // Scratch files removed at the run's end: a path that cannot hold them shows.
        {"sharding.storage.path",
         {{"sharding.storage.path=/proc/shardrec-kv"},
          {"sharding.compute_kernel=key_value"},
          true}},
    };
    return v;
}

// Keys whose other values cannot show in a one-process CPU run, and why. Keep this list short:
// each entry is a key that only changes logging, paths, placement or speed, or acts only on
// inputs or devices this run does not have, with the test that covers it.
const std::map<std::string, std::string>& no_run_effect() {
    static const std::map<std::string, std::string> v = {
        {"train.pipeline",
         "speed only: sparse_dist overlaps the input dist with compute and gives the same numbers "
         "(test_e2e_mpi 'pipelines agree')"},
        {"data.type",
         "criteo_binary needs preprocessed Criteo shards (test_e2e test_criteo trains on them)"},
        {"data.criteo_binary.path", "as data.type (test_criteo)"},
        {"data.criteo_binary.eval_days", "as data.type (test_criteo, test_eval)"},
        {"data.criteo_binary.eval_fraction", "as data.type (test_criteo, test_eval)"},
        {"runtime.device",
         "where the same computation runs; the GPU is checked against the CPU by test_train_cuda"},
        {"runtime.log_level", "logging only"},
        {"runtime.hot_row_update",
         "acts only on a CUDA device, where both kernels are checked against the float64 "
         "reference (test_backend_ops_cuda)"},
        {"runtime.threads",
         "speed only: results are the same whatever the thread count (test_trainer)"},
        {"runtime.bounds_check",
         "acts only on ids outside a table, which the synthetic data never has (test_e2e "
         "test_faults runs each mode on such ids)"},
        {"runtime.comm_timeout_s",
         "acts only when a peer stops answering, which needs ranks (test_comm timeouts)"},
        // One process trains unsharded tables; plans change placement and checkpoint layout, not
        // the numbers (test_e2e_mpi sharding invariance; test_planner, test_sharding_plan).
        {"sharding.planner", "placement only (sharding invariance)"},
        {"sharding.sharding_type", "placement only (sharding invariance)"},
        {"sharding.plan_file", "placement only (test_planner reads the saved plans)"},
        {"sharding.topology", "placement only (the auto planner's cost model; test_planner)"},
        {"sharding.cache.sample_batches",
         "the auto planner's miss time on data other than synthetic (test_planner "
         "\"CacheStatistics\", test_e2e \"plan predicts a key_value table's hit rate\")"},
        {"sharding.cache.prefetch_pipeline",
         "the planner's step estimate only (test_planner \"prefetch_pipeline overlaps\"); "
         "train.pipeline prefetch_sparse_dist fills the caches ahead"},
        {"sharding.tables[].name", "placement only (sharding invariance)"},
        {"sharding.tables[].sharding_type", "placement only (sharding invariance)"},
        {"sharding.tables[].ranks", "placement only (sharding invariance)"},
        {"sharding.tables[].column_widths", "placement only (sharding invariance)"},
        {"sharding.replica_groups",
         "needs ranks: one process is one group (test_e2e_mpi 'replica groups': 2D equals the "
         "one-process run and the replicas stay bitwise identical)"},
        // One process has no collectives to quantize (test_distributed_mpi test_qcomms compares
        // each precision with f32; test_e2e_mpi qcomms trains with them on two ranks).
        {"comm.qcomms.forward", "acts only on the collectives between ranks (test_qcomms)"},
        {"comm.hierarchical",
         "acts only with more than one node (test_hierarchical, test_hierarchical_dists at np 4 "
         "as two nodes)"},
        {"comm.qcomms.backward", "acts only on the collectives between ranks (test_qcomms)"},
        {"comm.allreduce_precision",
         "acts only on the all-reduce between ranks (test_e2e_mpi qcomms)"},
    };
    return v;
}

// The keys of the reference that hold a value (sections and lists of maps are containers).
std::vector<std::string> reference_value_keys() {
    std::vector<std::string> keys;
    std::istringstream in(config_reference());
    const std::regex row(R"(^\| `([^`]+)` \| ([^|]+) \|)");
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
        if (!std::regex_search(line, m, row))
            continue;
        const std::string type = m[2].str();
        if (type != "map" && type != "list of maps")
            keys.push_back(m[1].str());
    }
    return keys;
}

std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// What a run left in `dir`: every file by relative path with its bytes, but for what differs
// between identical runs (the run id, the copy of the config itself, timings).
std::string files_of(const fs::path& dir) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file())
            continue;
        const std::string rel = fs::relative(e.path(), dir).string();
        const std::string name = e.path().filename().string();
        if (name == ".lock" || name == "run.yaml" || name == "config.yaml") {
            continue;
        }
        std::string text = read_all(e.path());
        if (name == "manifest.yaml") {
            text = "(run id and checksums)";  // the tensors are compared as files
        } else if (name == "metrics.jsonl") {
            static const std::regex timing(
                R"re(,"(samples_per_s|loader_wait_ms|wall_s)":[^,}]*)re");
            text = std::regex_replace(text, timing, "");
        }
        files[rel] = text;
    }

    std::string out;
    for (const auto& [rel, text] : files)
        out += rel + "\n" + text + "\n";
    return out;
}

std::string replace_tmp(std::string s, const std::string& tmp) {
    const size_t at = s.find("{tmp}");
    return at == std::string::npos ? s : s.replace(at, 5, tmp);
}

// The outcome of a two-step run with these overrides: the files it wrote, or its error.
std::string run_outcome(std::vector<std::string> sets, const fs::path& scratch) {
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    for (std::string& s : sets)
        s = replace_tmp(s, scratch.string());
    const fs::path run = scratch / "run";
    try {
        test::ExpectLogs expected;  // skipped batches and refusals warn on purpose
        const Config config = parse_config(kBase, sets, "keys.yaml");
        {
            const train::RunDir dir = train::open_run_dir(run.string(), config, {});
            (void)train::run(config, dir);
        }
    } catch (const Error& e) {
        return std::string("error: ") + e.what();
    }
    return files_of(scratch);
}

fs::path scratch_dir() {
    return fs::temp_directory_path() / ("shardrec_test_config_keys_" + std::to_string(getpid()));
}

}  // namespace

TEST_CASE("Config keys: every reference key has a run effect or a documented reason", "[train]") {
    const std::vector<std::string> keys = reference_value_keys();
    REQUIRE(keys.size() > 50);
    const std::set<std::string> known(keys.begin(), keys.end());
    for (const std::string& key : keys) {
        INFO(key << ": add it to run_effects() with a value that changes a run, or to "
                    "no_run_effect() with why it cannot");
        CHECK(run_effects().count(key) + no_run_effect().count(key) == 1);
    }
    for (const auto& [key, v] : run_effects()) {
        INFO(key << " is not a key of the reference any more");
        CHECK(known.count(key) == 1);
    }
    for (const auto& [key, why] : no_run_effect()) {
        INFO(key << " is not a key of the reference any more");
        CHECK(known.count(key) == 1);
    }
}

TEST_CASE("Config keys: each key set to another value changes a two-step run", "[train]") {
    // key_value tables train in the sharded collection, over the world group (of this one
    // process), as the shardrec binary runs them.
    comm::init_process(nullptr, nullptr);
    const fs::path scratch = scratch_dir();
    const std::string plain = run_outcome({}, scratch / "base");
    // The baseline trains, and reproduces itself exactly (else every difference is noise).
    REQUIRE(plain.rfind("error: ", 0) == std::string::npos);
    REQUIRE(plain.find("step-00000002") != std::string::npos);
    REQUIRE(run_outcome({}, scratch / "base") == plain);
    std::map<std::vector<std::string>, std::string> baselines{{{}, plain}};
    for (const auto& [key, v] : run_effects()) {
        auto it = baselines.find(v.context);
        if (it == baselines.end())
            it = baselines.emplace(v.context, run_outcome(v.context, scratch / "base")).first;
        std::vector<std::string> sets = v.context;
        sets.insert(sets.end(), v.variant.begin(), v.variant.end());
        const std::string changed = run_outcome(sets, scratch / "variant");
        INFO(key << " with " << Catch::Detail::stringify(sets) << " left the run unchanged; "
                 << "baseline: " << it->second.substr(0, 300));
        CHECK(changed != it->second);
        const std::string leaf = key.substr(key.rfind('.') + 1);
        if (v.refused) {
            CHECK(changed.rfind("error: ", 0) == 0);
            CHECK_THAT(changed, Catch::Contains(leaf));
        } else {
            CHECK(changed.rfind("error: ", 0) == std::string::npos);
        }
    }
    fs::remove_all(scratch);
}

// compute_kernel fused_uvm (rows in host memory mapped for a GPU) and fused_uvm_caching (rows in
// host memory behind an HBM cache) are values of a key this walk covers with dense: on the CPU a
// run stops naming the key and the CPU's kernels; with runtime.device cuda the config reads
// (test_train_cuda trains both against fused).
TEST_CASE("Config keys: compute_kernel fused_uvm(_caching) is refused on the CPU", "[train]") {
    comm::init_process(nullptr, nullptr);
    const fs::path scratch = scratch_dir();
    for (const std::string kernel : {"fused_uvm", "fused_uvm_caching"}) {
        for (const std::string& set :
             {"sharding.compute_kernel=" + kernel,
              "sharding.tables=[{name: a, compute_kernel: " + kernel + "}]"}) {
            INFO(set);
            const std::string refused = run_outcome({set}, scratch / "uvm");
            CHECK(refused.rfind("error: ", 0) == 0);
            CHECK_THAT(refused, Catch::Contains("compute_kernel"));
            CHECK_THAT(refused, Catch::Contains(kernel + " keeps a GPU's rows in host memory, and "
                                                         "runtime.device is cpu"));
            CHECK_THAT(refused, Catch::Contains("fused (rows in memory) or key_value"));
            CHECK_NOTHROW(parse_config(kBase, {set, "runtime.device=cuda"}, "keys.yaml"));
        }
    }
    fs::remove_all(scratch);
}
