// The strict reader's error messages: each names the path, the location and what was expected,
// and all errors of a file come back together.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/error.h"

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

// A valid config; tests append to it or override parts of it.
const char* const kBase = R"(train:
  steps: 10
data:
  batch_size: 4
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [4, 1]
  tables:
    - {name: a, num_embeddings: 10}
    - {name: b, num_embeddings: 20}
)";

// The message of the Error that parsing throws ("" when it does not throw).
std::string errors_of(const std::string& text, const std::vector<std::string>& sets = {}) {
    try {
        parse_config(text, sets, "t.yaml");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("Config: the base test config is valid", "[config]") {
    const Config c = parse_config(kBase, {}, "t.yaml");
    CHECK(c.train.steps == 10);
    CHECK(c.model.tables.size() == 2);
    CHECK(c.source_file == "t.yaml");
}

TEST_CASE("Config: unknown key names path, line:col and the closest key", "[config]") {
    const std::string text = R"(train:
  steps: 10
  stpes: 5
data: {batch_size: 4}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [1]
  tables:
    - {name: a, num_embeddings: 10}
    - {name: b, num_embeddings: 10}
    - {name: c, num_embeddings: 10}
    - {name: d, num_embeddings: 10, dimm: 8}
)";
    const std::string msg = errors_of(text);
    CHECK_THAT(msg, Contains("t.yaml:3:3: train.stpes: unknown key (did you mean 'steps'?)"));
    CHECK_THAT(msg, Contains("t.yaml:14:37: model.tables[3].dimm: unknown key "
                             "(did you mean 'embedding_dim'?)"));
    CHECK_THAT(msg, Contains("(2 errors)"));
}

TEST_CASE("Config: unknown key far from every known key has no suggestion", "[config]") {
    const std::string msg = errors_of(std::string(kBase) + "zzzzzz: 1\n");
    CHECK_THAT(msg + "\n", Contains("t.yaml:13:1: zzzzzz: unknown key\n"));
    CHECK(msg.find("did you mean") == std::string::npos);
}

TEST_CASE("Config: a wrong type says what was expected and what was found", "[config]") {
    CHECK_THAT(errors_of(kBase, {"train.steps=abc"}),
               Contains("--set train.steps=abc: train.steps: expected an integer, got 'abc'"));
    const std::string text = R"(train: {steps: 1.5}
data: {batch_size: [4]}
model: {type: dlrm, embedding_dim: 8, bottom_mlp: [16, x], top_mlp: [1], tables: 3}
optimizer: {dense: {learning_rate: fast}}
)";
    const std::string msg = errors_of(text);
    CHECK_THAT(msg, Contains("t.yaml:1:16: train.steps: expected an integer, got '1.5'"));
    CHECK_THAT(msg, Contains("t.yaml:2:20: data.batch_size: expected an integer, got a list"));
    CHECK_THAT(msg, Contains("model.bottom_mlp[1]: expected an integer, got 'x'"));
    CHECK_THAT(msg, Contains("model.tables: expected a list, got '3'"));
    CHECK_THAT(errors_of(kBase, {"model.tables[0].weighted=yes"}),
               Contains("model.tables[0].weighted: expected true or false, got 'yes'"));
    CHECK_THAT(msg, Contains("optimizer.dense.learning_rate: expected a number, got 'fast'"));
}

TEST_CASE("Config: a missing required key is reported by path", "[config]") {
    const std::string text = R"(data: {batch_size: 4}
model:
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [1]
  tables:
    - {num_embeddings: 10}
)";
    const std::string msg = errors_of(text);
    CHECK_THAT(msg, Contains("train.steps: missing required key"));
    CHECK_THAT(msg, Contains("t.yaml:2:1: model.type: missing required key"));
    CHECK_THAT(msg, Contains("t.yaml:7:7: model.tables[0].name: missing required key"));
}

TEST_CASE("Config: a bad choice lists the allowed values and the closest one", "[config]") {
    CHECK_THAT(errors_of(kBase, {"model.type=dlrn"}),
               Contains("model.type: expected one of dlrm, dlrm_dcn, deepfm, got 'dlrn' "
                        "(did you mean 'dlrm'?)"));
    CHECK_THAT(errors_of(kBase, {"optimizer.sparse.type=rowwise_adagard"}),
               Contains("did you mean 'rowwise_adagrad'?"));
    CHECK_THAT(errors_of(kBase, {"model.tables[0].pooling=max"}),
               Contains("model.tables[0].pooling: expected one of sum, mean, got 'max'"));
}

TEST_CASE("Config: numbers outside their range are errors", "[config]") {
    CHECK_THAT(errors_of(kBase, {"data.batch_size=0"}),
               Contains("data.batch_size: must be >= 1, got '0'"));
    CHECK_THAT(errors_of(kBase, {"optimizer.dense.type=adam", "optimizer.dense.beta2=1"}),
               Contains("optimizer.dense.beta2: must be >= 0, < 1, got '1'"));
    // A rule's own setting under another rule, which would ignore it.
    CHECK_THAT(errors_of(kBase, {"optimizer.dense.type=adagrad", "optimizer.dense.beta2=0.5"}),
               Contains("optimizer.dense.beta2: only valid when optimizer.dense.type is adam"));
    CHECK_THAT(errors_of(kBase, {"optimizer.sparse.type=sgd",
                                 "optimizer.sparse.initial_accumulator_value=1"}),
               Contains("optimizer.sparse.initial_accumulator_value: only valid when "
                        "optimizer.sparse.type is adagrad or rowwise_adagrad"));
    CHECK_THAT(errors_of(kBase, {"model.bottom_mlp=[16, -8]"}),
               Contains("model.bottom_mlp[1]: must be >= 1, got '-8'"));
    CHECK_THAT(errors_of(kBase, {"runtime.device=gpu"}),
               Contains("runtime.device: expected cpu, cuda or cuda:N, got 'gpu'"));
}

TEST_CASE("Config: --set overrides edit the tree before it is read", "[config]") {
    const Config c =
        parse_config(kBase,
                     {"train.steps=42", "model.tables[1].num_embeddings=77",
                      "model.top_mlp=[8, 4, 1]", "runtime.device=cuda:1",
                      "optimizer.sparse={type: adam, learning_rate: 0.5}", "train.steps=43"},
                     "t.yaml");
    CHECK(c.train.steps == 43);  // the last one wins
    CHECK(c.model.tables[1].num_embeddings == 77);
    CHECK(c.model.top_mlp == std::vector<int64_t>{8, 4, 1});
    CHECK(c.runtime.device == "cuda:1");
    CHECK(c.optimizer.sparse.type == "adam");
    CHECK(c.optimizer.sparse.learning_rate == 0.5);
}

TEST_CASE("Config: --set KEY=null removes the key, so its default applies", "[config]") {
    const std::string runtime =
        std::string(kBase) + "runtime:\n  threads: 1\n  comm_timeout_s: 5\n";
    const Config c =
        parse_config(runtime, {"runtime.threads=null", "runtime.comm_timeout_s=~"}, "t.yaml");
    CHECK(c.runtime.threads == Config().runtime.threads);
    CHECK(c.runtime.comm_timeout_s == Config().runtime.comm_timeout_s);
    // A file's data source block must go with its type (strictness); null removes it.
    std::string criteo = kBase;
    criteo.insert(criteo.find("  batch_size: 4\n"),
                  "  type: criteo_binary\n  criteo_binary: {path: /x}\n");
    CHECK_THAT(errors_of(criteo, {"data.type=synthetic"}),
               Contains("data.criteo_binary: only valid when data.type is criteo_binary"));
    CHECK(parse_config(criteo, {"data.type=synthetic", "data.criteo_binary=null"}, "t.yaml")
              .data.type == "synthetic");
    // Only a literal null removes, and only a key that is there: a typo is still an error, and
    // an empty value (an unset shell variable) is still a bad value.
    CHECK_THAT(errors_of(runtime, {"runtime.thread=null"}),
               Contains("--set runtime.thread=null: runtime.thread is not set, so there is "
                        "nothing to remove"));
    CHECK_THAT(errors_of(runtime, {"runtim.threads=null"}), Contains("runtim is not set"));
    CHECK_THAT(errors_of(runtime, {"runtime.threads="}), Contains("runtime.threads"));
}

TEST_CASE("Config: a typo in --set is an unknown key located at the --set", "[config]") {
    CHECK_THAT(errors_of(kBase, {"train.stesp=3"}),
               Contains("--set train.stesp=3: train.stesp: unknown key (did you mean 'steps'?)"));
    CHECK_THAT(errors_of(kBase, {"modle.type=dlrm"}),
               Contains("--set modle.type=dlrm: modle: unknown key (did you mean 'model'?)"));
    CHECK_THAT(errors_of(kBase, {"model.tables[0].embeding_dim=8"}),
               Contains("--set model.tables[0].embeding_dim=8: model.tables[0].embeding_dim: "
                        "unknown key (did you mean 'embedding_dim'?)"));
}

TEST_CASE("Config: a removed key is an unknown key that says why and what to do", "[config]") {
    // runtime.deterministic chose nothing (every kernel is deterministic), so it was removed.
    const std::string msg = errors_of(std::string(kBase) + "runtime: {deterministic: true}\n");
    CHECK_THAT(msg, Contains(": runtime.deterministic: unknown key: removed, as there is nothing "
                             "to choose: every kernel is bitwise deterministic"));
    CHECK_THAT(msg, Contains("delete the line"));
    CHECK_THAT(errors_of(kBase, {"runtime.deterministic=false"}),
               Contains("--set runtime.deterministic=false: runtime.deterministic: unknown key: "
                        "removed"));
}

TEST_CASE("Config: malformed --set overrides are errors", "[config]") {
    CHECK_THAT(errors_of(kBase, {"train.steps"}),
               Contains("--set train.steps: expected KEY=VALUE"));
    CHECK_THAT(errors_of(kBase, {"model.tables[5].name=x"}),
               Contains("--set model.tables[5].name=x: model.tables has 2 elements, no [5]"));
    CHECK_THAT(errors_of(kBase, {"train.steps.x=1"}),
               Contains("--set train.steps.x=1: train.steps is not a map"));
    CHECK_THAT(errors_of(kBase, {"model..type=dlrm"}), Contains("malformed key"));
    CHECK_THAT(errors_of(kBase, {"train.steps=[1, 2"}), Contains("cannot parse the value"));
}

TEST_CASE("Config: every error of a file is collected into one message", "[config]") {
    const std::string text = R"(train:
  steps: -1
  sed: 1
data:
  batch_size: many
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [4, 1]
  tables:
    - {name: a, num_embeddings: 10}
runtime: {log_level: loud}
)";
    const std::string msg = errors_of(text, {"optimizer.dense.typo=1"});
    CHECK_THAT(msg, Contains("invalid config 't.yaml' (5 errors):\n"));
    CHECK_THAT(msg, Contains("\n  t.yaml:2:10: train.steps: must be >= 0, got '-1'\n"));
    CHECK_THAT(msg, Contains("\n  t.yaml:3:3: train.sed: unknown key (did you mean 'seed'?)\n"));
    CHECK_THAT(msg, Contains("\n  t.yaml:5:15: data.batch_size: expected an integer, got 'many'"));
    CHECK_THAT(msg, Contains("runtime.log_level: expected one of trace, debug, info, warn, "
                             "error, off, got 'loud'"));
    CHECK_THAT(msg, Contains("--set optimizer.dense.typo=1: optimizer.dense.typo: unknown key"));
}

TEST_CASE("Config: duplicate keys and YAML syntax errors are reported", "[config]") {
    CHECK_THAT(errors_of(std::string(kBase) + "train: {steps: 3}\n"),
               Contains("t.yaml:13:1: train: duplicate key (first at line 1)"));
    CHECK_THAT(errors_of("train: {steps: 3\n"), Contains("t.yaml:2:1: YAML syntax error"));
    CHECK_THAT(errors_of("- 1\n- 2\n"), Contains("expected a map at the top level, got a list"));
    CHECK_THROWS_WITH(load_config("/nonexistent/x.yaml", {}),
                      Contains("the config file '/nonexistent/x.yaml' does not exist"));
    const std::string dir = std::filesystem::temp_directory_path().string();
    CHECK_THROWS_WITH(load_config(dir, {}),
                      Contains("the config file '" + dir + "' is a directory, expected a file"));
}

TEST_CASE("Config: closest_match suggests only likely typos", "[config]") {
    const std::vector<std::string> keys = {"embedding_dim", "num_embeddings", "name", "pooling"};
    CHECK(closest_match("dimm", keys) == "embedding_dim");
    CHECK(closest_match("embeding_dim", keys) == "embedding_dim");
    CHECK(closest_match("Name", keys) == "name");
    CHECK(closest_match("polling", keys) == "pooling");
    CHECK(closest_match("lr", keys).empty());
    CHECK(closest_match("weighted", keys).empty());
    CHECK(edit_distance("ab", "ba") == 1);  // one adjacent swap
    CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("Config: runtime.threads past the CPUs the process may run on names the limit",
          "[config]") {
    const int64_t cpus = usable_cpus();
    REQUIRE(cpus >= 1);
    CHECK(errors_of(kBase, {"runtime.threads=" + std::to_string(cpus)}).empty());
    CHECK_THAT(errors_of(kBase, {"runtime.threads=" + std::to_string(cpus + 1)}),
               Contains("runtime.threads") &&
                   Contains(std::to_string(cpus + 1) + " threads exceed the " +
                            std::to_string(cpus) + " CPUs this process may run on") &&
                   Contains("use at most " + std::to_string(cpus)));
    CHECK_THAT(errors_of(kBase, {"runtime.threads=100000"}), Contains("100000 threads exceed"));
    CHECK(errors_of(kBase, {"runtime.threads=0"}).empty());
}
