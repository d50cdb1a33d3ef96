// Config structs: resolved defaults, the model rules, the dump/read round trip, the reference,
// and every shipped file in configs/.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/error.h"

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

const char* const kModelHead = R"(train: {steps: 10}
data: {batch_size: 4}
model:
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [4, 1]
  tables:
    - {name: a, num_embeddings: 10}
    - {name: b, num_embeddings: 20, feature_names: [x, y]}
)";

std::string errors_of(const std::string& text, const std::vector<std::string>& sets = {}) {
    try {
        parse_config(text, sets, "t.yaml");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

std::filesystem::path repo_root() {
    // This file is test/config/test_config.cpp.
    return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

// Every dotted key of a YAML map, list elements written as "[]" ("model.tables[].name").
void collect_keys(const YAML::Node& node, const std::string& prefix, std::set<std::string>& out) {
    if (node.IsMap()) {
        for (auto it = node.begin(); it != node.end(); ++it) {
            const std::string key = prefix + it->first.Scalar();
            out.insert(key);
            collect_keys(it->second, key + ".", out);
        }
    } else if (node.IsSequence() && node.size() > 0 && node[0].IsMap()) {
        collect_keys(node[0], prefix.substr(0, prefix.size() - 1) + "[].", out);
    }
}

}  // namespace

TEST_CASE("Config: derived defaults are filled in when reading", "[config]") {
    const Config c = parse_config(kModelHead, {"model.type=dlrm"}, "t.yaml");
    REQUIRE(c.model.tables.size() == 2);
    CHECK(c.model.tables[0].embedding_dim == 8);  // from model.embedding_dim
    CHECK(c.model.tables[0].feature_names == std::vector<std::string>{"f_a"});
    CHECK(c.model.tables[1].feature_names == std::vector<std::string>{"x", "y"});
    CHECK(c.model.tables[0].pooling == "sum");
    CHECK(c.model.tables[0].data_type == "f32");
    CHECK(c.train.log_every == 50);
    CHECK(c.train.eval_samples == 65536);
    CHECK(c.data.type == "synthetic");
    CHECK(c.data.synthetic.zipf_alpha == 1.05);
    CHECK(c.model.dense_in_features == 13);
    CHECK(c.runtime.device == "cpu");
}

TEST_CASE("Config: model rules name the offending path", "[config]") {
    const std::string head = kModelHead;
    CHECK_THAT(errors_of(head, {"model.type=dlrm", "model.bottom_mlp=[16, 4]"}),
               Contains("model.bottom_mlp: the last size must equal the embedding dim 8, got 4"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm_dcn", "model.top_mlp=[4, 2]"}),
               Contains("model.top_mlp: the last size must be 1 (the logit), got 2"));
    CHECK_THAT(errors_of(head, {"model.type=deepfm", "model.tables[1].embedding_dim=16"}),
               Contains("model.tables[1].embedding_dim: deepfm needs one embedding dim for all "
                        "tables: 16 here, 8 in tables[0]"));
    std::string same_names = head;
    same_names.replace(same_names.find("name: b"), 7, "name: a");
    CHECK_THAT(errors_of(same_names, {"model.type=dlrm"}),
               Contains("t.yaml:9:14: model.tables[1].name: duplicate table name 'a' (also "
                        "tables[0])"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", "model.tables[1].feature_names=[f_a]"}),
               Contains("model.tables[1].feature_names: feature 'f_a' is already looked up in "
                        "tables[0] ('a')"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", "model.tables[1].weighted=true",
                                "model.tables[1].position_weights=4"}),
               Contains("model.tables[1].position_weights: table 'b' is weighted: its features "
                        "carry weights from the data or position weights, not both"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", "model.tables[0].position_weights=-1"}),
               Contains("model.tables[0].position_weights"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", "model.embedding_dim=0"}),
               Contains("model.tables[0].embedding_dim: missing: set it on the table or as "
                        "model.embedding_dim"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", "model.tables=[]"}),
               Contains("model.tables: needs at least one element"));
}

TEST_CASE("Config: a table's managed_collision section is checked", "[config]") {
    const std::string head = kModelHead;
    const std::string mc = "model.tables[0].managed_collision=";
    CHECK(
        errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, threshold: dynamic:3}"}).empty());
    CHECK(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 6, mch_size: 4, eviction_policy: "
                                                   "distance_lfu, decay_exponent: 2.5, threshold: "
                                                   "probabilistic:0.1}"})
              .empty());
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 8}"}),
               Contains("model.tables[0].managed_collision.zch_size: table 'a': zch_size 8 + "
                        "mch_size 0 must equal num_embeddings 10"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, threshold: dynamic:0}"}),
               Contains("model.tables[0].managed_collision.threshold: dynamic:N needs an integer "
                        "N >= 1, not '0'"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, threshold: rare}"}),
               Contains("unknown threshold 'rare'"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, threshold: "
                                                        "probabilistic:1.5}"}),
               Contains("0 < p <= 1, not '1.5'"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, eviction_policy: fifo}"}),
               Contains("model.tables[0].managed_collision.eviction_policy"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, decay_exponent: 0}"}),
               Contains("model.tables[0].managed_collision.decay_exponent"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, eviction_interval: 0}"}),
               Contains("model.tables[0].managed_collision.eviction_interval"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, zch: 3}"}),
               Contains("model.tables[0].managed_collision.zch"));
    CHECK(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 6, mch_size: 4, "
                                                   "total_num_buckets: 2}"})
              .empty());
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 6, mch_size: 4, "
                                                        "total_num_buckets: 3}"}),
               Contains("model.tables[0].managed_collision.total_num_buckets: table 'a': "
                        "zch_size 6 and mch_size 4 must both be multiples of total_num_buckets 3"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, total_num_buckets: 10}"}),
               Contains("model.tables[0].managed_collision.zch_size: must be >= 2 * "
                        "total_num_buckets (20) with mch_size 0"));
    CHECK_THAT(errors_of(head, {"model.type=dlrm", mc + "{zch_size: 10, total_num_buckets: 0}"}),
               Contains("model.tables[0].managed_collision.total_num_buckets"));
}

TEST_CASE("Config: type-specific sections are only valid for their type", "[config]") {
    const std::string head = kModelHead;
    CHECK_THAT(errors_of(head, {"model.type=dlrm", "model.dcn={num_layers: 2}"}),
               Contains("--set model.dcn={num_layers: 2}: model.dcn: only valid when model.type "
                        "is dlrm_dcn"));
    CHECK_THAT(errors_of(head + "  deepfm: {hidden: [4]}\n", {"model.type=dlrm_dcn"}),
               Contains("t.yaml:10:11: model.deepfm: only valid when model.type is deepfm"));
    const Config dcn = parse_config(head, {"model.type=dlrm_dcn", "model.dcn.low_rank=4"}, "t");
    CHECK(dcn.model.dcn.low_rank == 4);
    CHECK(dcn.model.dcn.num_layers == 3);
    const Config fm = parse_config(head, {"model.type=deepfm", "model.deepfm.hidden=[32]"}, "t");
    CHECK(fm.model.deepfm.hidden == std::vector<int64_t>{32});
    // The dump leaves out the sections of other types.
    CHECK(dump_config(fm).find("dcn") == std::string::npos);
    CHECK_THAT(dump_config(fm), Contains("deepfm:"));
}

TEST_CASE("Config: dump_config reads back to the same config", "[config]") {
    const std::vector<std::string> sets = {"model.type=dlrm_dcn",
                                           "model.dcn.num_layers=2",
                                           "model.tables[1].pooling=mean",
                                           "model.tables[1].pooling_factor=2.5",
                                           "model.tables[0].data_type=bf16",
                                           "model.tables[0].weighted=true",
                                           "optimizer.dense.type=adam",
                                           "optimizer.dense.eps=1e-8",
                                           "optimizer.dense.learning_rate=0.004",
                                           "optimizer.dense.warmup_steps=10",
                                           "optimizer.dense.decay_start_step=20",
                                           "optimizer.dense.decay_steps=30",
                                           "optimizer.sparse.type=rowwise_adagrad",
                                           "optimizer.sparse.learning_rate=0.1",
                                           "train.seed=7",
                                           "data.synthetic.zipf_alpha=0.3",
                                           "runtime.threads=1",
                                           "runtime.nan_policy=skip_batch",
                                           "runtime.log_level=debug"};
    const Config c = parse_config(kModelHead, sets, "t.yaml");
    const std::string dumped = dump_config(c);
    const Config back = parse_config(dumped, {}, "dumped.yaml");
    // Same text but for the source line, and the same values field by field.
    const auto body = [](const std::string& s) { return s.substr(s.find('\n') + 1); };
    CHECK(body(dump_config(back)) == body(dumped));
    CHECK(back.model.type == "dlrm_dcn");
    CHECK(back.model.dcn.num_layers == 2);
    CHECK(back.model.tables[1].pooling == "mean");
    CHECK(back.model.tables[1].pooling_factor == 2.5);
    CHECK(back.model.tables[0].data_type == "bf16");
    CHECK(back.model.tables[0].weighted);
    CHECK(back.model.tables[0].feature_names == std::vector<std::string>{"f_a"});
    CHECK(back.optimizer.dense.eps == 1e-8);
    CHECK(back.optimizer.dense.learning_rate == 0.004);
    CHECK(back.optimizer.dense.decay_steps == 30);
    CHECK(back.optimizer.sparse.type == "rowwise_adagrad");
    CHECK(back.train.seed == 7);
    CHECK(back.data.synthetic.zipf_alpha == 0.3);
    CHECK(back.runtime.threads == 1);
    CHECK(back.runtime.nan_policy == "skip_batch");
    CHECK(back.runtime.log_level == "debug");
}

TEST_CASE("Config: section to_yaml and from_yaml round-trip", "[config]") {
    ModelConfig model = parse_config(kModelHead, {"model.type=dlrm"}, "t").model;
    model.tables[0].pooling_factor = 0.1;
    ConfigDocument doc = ConfigDocument::from_node(model.to_yaml(), "model");
    ConfigNode node = doc.root();
    ModelConfig back;
    back.from_yaml(node);
    doc.throw_if_errors();
    CHECK(back.tables[0].pooling_factor == 0.1);
    CHECK(back.tables[1].num_embeddings == 20);
    CHECK(YAML::Dump(back.to_yaml()) == YAML::Dump(model.to_yaml()));

    OptimizerConfig opt;
    opt.dense.learning_rate = 1.0 / 3.0;  // needs all 17 digits
    ConfigDocument opt_doc = ConfigDocument::from_node(opt.to_yaml(), "optimizer");
    ConfigNode opt_node = opt_doc.root();
    OptimizerConfig opt_back;
    opt_back.from_yaml(opt_node);
    opt_doc.throw_if_errors();
    CHECK(opt_back.dense.learning_rate == 1.0 / 3.0);
}

TEST_CASE("Config: the reference documents every key the dump writes", "[config]") {
    const std::string reference = config_reference();
    CHECK_THAT(reference, Contains("| `train.steps` | int | required | optimizer steps to run; 0 "
                                   "with checkpoint_every > 0 saves the initial weights as step 0 "
                                   "(>= 0) |"));
    CHECK_THAT(reference, Contains("| `model.tables[].embedding_dim` | int | model.embedding_dim"));
    CHECK_THAT(reference, Contains("| `model.dcn.low_rank` | int | 512 |"));
    CHECK_THAT(reference, Contains("| `optimizer.sparse.type` | one of: sgd, adagrad, "
                                   "rowwise_adagrad, adam | sgd |"));
    CHECK_THAT(reference, Contains("Only when model.type is deepfm"));
    for (const std::string type : {"dlrm", "dlrm_dcn", "deepfm"}) {
        const Config c = parse_config(kModelHead, {"model.type=" + type}, "t");
        std::set<std::string> keys;
        collect_keys(c.to_yaml(), "", keys);
        for (const std::string& key : keys) {
            INFO(key);
            CHECK_THAT(reference, Contains("| `" + key + "` |"));
        }
    }
}

TEST_CASE("Config: every file in configs/ validates", "[config]") {
    const std::filesystem::path dir = repo_root() / "configs";
    REQUIRE(std::filesystem::is_directory(dir));
    std::set<std::string> seen;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".yaml") {
            continue;
        }
        INFO(entry.path().string());
        Config c;
        REQUIRE_NOTHROW(c = load_config(entry.path().string(), {}));
        CHECK(c.source_file == entry.path().string());
        CHECK_NOTHROW(parse_config(dump_config(c), {}, "dump"));
        seen.insert(entry.path().filename().string());
    }
    for (const char* name :
         {"quickstart.yaml", "dlrm_criteo_kaggle.yaml", "dlrm_dcnv2_mlperf.yaml", "deepfm.yaml"}) {
        CHECK(seen.count(name) == 1);
    }
}

TEST_CASE("Config: the MLPerf DLRM-DCNv2 config has the WORKLOADS.md shapes", "[config]") {
    const Config c = load_config((repo_root() / "configs" / "dlrm_dcnv2_mlperf.yaml").string(), {});
    REQUIRE(c.model.tables.size() == 26);
    int64_t rows = 0;
    double lookups = 0;
    for (const auto& t : c.model.tables) {
        rows += t.num_embeddings;
        lookups += t.pooling_factor;
        CHECK(t.embedding_dim == 128);
    }
    CHECK(rows == 204184588);
    CHECK(lookups == 214);
    CHECK(c.model.tables[20].pooling_factor == 100);
    CHECK(c.model.bottom_mlp == std::vector<int64_t>{512, 256, 128});
    CHECK(c.model.top_mlp == std::vector<int64_t>{1024, 1024, 512, 256, 1});
    CHECK(c.model.dcn.num_layers == 3);
    CHECK(c.model.dcn.low_rank == 512);
    CHECK(c.optimizer.dense.type == "adagrad");
    CHECK(c.optimizer.sparse.learning_rate == 0.004);
    CHECK(c.optimizer.sparse.eps == 1e-8);
    CHECK(c.data.batch_size == 6912);
}

TEST_CASE("Config: the MLPerf DLRM v1 config has the WORKLOADS.md shapes", "[config]") {
    const Config c = load_config((repo_root() / "configs" / "dlrm_mlperf_v1.yaml").string(), {});
    REQUIRE(c.model.tables.size() == 26);
    int64_t rows = 0;
    for (const auto& t : c.model.tables) {
        rows += t.num_embeddings;
        CHECK(t.num_embeddings <= 40000000);  // the reference's --max-ind-range
        CHECK(t.pooling_factor == 1);         // one-hot
        CHECK(t.embedding_dim == 128);
    }
    CHECK(rows == 187767399);
    CHECK(c.model.type == "dlrm");
    CHECK(c.model.bottom_mlp == std::vector<int64_t>{512, 256, 128});
    CHECK(c.model.top_mlp == std::vector<int64_t>{1024, 1024, 512, 256, 1});
    CHECK(c.optimizer.dense.type == "sgd");
    CHECK(c.optimizer.sparse.type == "sgd");
    CHECK(c.optimizer.dense.learning_rate == 24.0);
    CHECK(c.optimizer.dense.warmup_steps == 2750);
    CHECK(c.optimizer.dense.decay_start_step == 49315);
    CHECK(c.optimizer.dense.decay_steps == 27772);
    CHECK(c.optimizer.dense.decay_power == 2.0);
    CHECK(c.optimizer.dense.end_lr_factor == 0.0);
    CHECK(c.data.batch_size * 8 == 55296);
}

TEST_CASE("Config: the DLRM synthetic benchmark config has its shapes", "[config]") {
    const Config c =
        load_config((repo_root() / "configs" / "dlrm_synthetic_benchmark.yaml").string(), {});
    REQUIRE(c.model.tables.size() == 8);
    for (const auto& t : c.model.tables) {
        CHECK(t.num_embeddings == 1000000);
        CHECK(t.pooling_factor == 100);
        CHECK(t.embedding_dim == 64);
    }
    CHECK(c.model.dense_in_features == 512);
    CHECK(c.model.bottom_mlp == std::vector<int64_t>{512, 64});
    CHECK(c.model.top_mlp == std::vector<int64_t>{1024, 1024, 1024, 1});
    CHECK(c.data.batch_size == 2048);
}

TEST_CASE("Config: train.target_auc needs evaluations", "[config]") {
    CHECK_THAT(
        errors_of(kModelHead, {"model.type=dlrm", "train.target_auc=0.8", "train.eval_samples=0"}),
        Contains("train.target_auc: 0.8 needs evaluations, but eval_samples is 0"));
    CHECK(errors_of(kModelHead, {"model.type=dlrm", "train.target_auc=0.8"}).empty());
    CHECK(errors_of(kModelHead, {"model.type=dlrm", "train.eval_samples=0"}).empty());
}

TEST_CASE("Config: Criteo data without an eval split cannot evaluate", "[config]") {
    const std::vector<std::string> criteo = {"model.type=dlrm", "data.type=criteo_binary",
                                             "data.criteo_binary.path=/data",
                                             "data.criteo_binary.eval_days=0"};
    CHECK_THAT(errors_of(kModelHead, criteo),
               Contains("data.criteo_binary.eval_days: 0 with eval_fraction 0 leaves no eval "
                        "split, but train.eval_samples is 65536"));
    auto with = [&criteo](const std::string& set) {
        std::vector<std::string> sets = criteo;
        sets.push_back(set);
        return sets;
    };
    CHECK(errors_of(kModelHead, with("train.eval_samples=0")).empty());
    CHECK(errors_of(kModelHead, with("data.criteo_binary.eval_fraction=0.1")).empty());
}

// The caches are filled ahead only by the prefetch pipeline: the planner's overlap needs it.
TEST_CASE("Config: sharding.cache.prefetch_pipeline needs the prefetch pipeline", "[config]") {
    const std::string head = kModelHead;
    const std::vector<std::string> key_value = {
        "model.type=dlrm", "sharding.compute_kernel=key_value", "sharding.storage.path=/tmp/kv",
        "sharding.cache.prefetch_pipeline=true"};
    std::vector<std::string> sparse_dist = key_value;
    sparse_dist.push_back("train.pipeline=sparse_dist");
    CHECK_THAT(errors_of(head, sparse_dist),
               Contains("sharding.cache.prefetch_pipeline: the caches are filled ahead only by "
                        "train.pipeline prefetch_sparse_dist, and train.pipeline is sparse_dist"));
    std::vector<std::string> prefetch = key_value;
    prefetch.push_back("train.pipeline=prefetch_sparse_dist");
    CHECK(errors_of(head, prefetch).empty());
}
