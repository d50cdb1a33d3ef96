// The run directory `shardrec train` writes (config.yaml, metrics.jsonl) and the progress text.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "engine/config/config.h"
#include "engine/train/progress.h"
#include "engine/train/run_dir.h"

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

const char* const kConfig = R"(train: {steps: 10}
data: {batch_size: 4}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [4, 1]
  tables: [{name: a, num_embeddings: 10}]
)";

// A fresh directory under the system temp dir, removed at scope exit.
struct ScratchDir {
    ScratchDir() {
        static int counter = 0;
        path =
            std::filesystem::temp_directory_path() /
            ("shardrec_test_run_dir_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(path);
    }

    ~ScratchDir() { std::filesystem::remove_all(path); }

    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    ScratchDir(ScratchDir&&) = delete;
    ScratchDir& operator=(ScratchDir&&) = delete;

    std::filesystem::path path;
};

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_CASE("MetricsWriter: one flushed JSON object per line with %.9g floats", "[train]") {
    ScratchDir dir;
    std::filesystem::create_directories(dir.path);
    train::MetricsWriter writer(dir.path.string(), true);
    REQUIRE(writer.enabled());
    writer.train(50, 0.6931471805599453, 0.004, 123456.789);
    // Flushed per line: readable while the writer is still open.
    CHECK(read_file(writer.path()) ==
          "{\"kind\":\"train\",\"step\":50,\"loss\":0.693147181,\"lr\":0.004,"
          "\"samples_per_s\":123456.789}\n");
    train::Metrics m;
    m.loss = 0.5;
    m.auc = 0.80275123456;
    m.ne = 0.98;
    m.accuracy = std::numeric_limits<double>::quiet_NaN();
    m.calibration = 1.25;
    m.count = 4096;
    writer.eval(100, m);
    writer.target_reached(100, 0.80275123456, 0.8);
    writer.done(100, 25600, 1.5);
    const std::string text = read_file(writer.path());
    CHECK_THAT(text, Contains("{\"kind\":\"eval\",\"step\":100,\"loss\":0.5,\"auc\":0.802751235,"
                              "\"ne\":0.98,\"accuracy\":null,\"calibration\":1.25,"
                              "\"count\":4096}\n"));
    CHECK_THAT(text, Contains("{\"kind\":\"target_reached\",\"step\":100,\"auc\":0.802751235,"
                              "\"target_auc\":0.8}\n"));
    CHECK_THAT(text, Contains("{\"kind\":\"done\",\"steps\":100,\"samples\":25600,"
                              "\"wall_s\":1.5}\n"));
}

TEST_CASE("MetricsWriter: disabled writers (ranks other than 0) create no file", "[train]") {
    ScratchDir dir;
    std::filesystem::create_directories(dir.path);
    train::MetricsWriter writer(dir.path.string(), false);
    CHECK_FALSE(writer.enabled());
    writer.train(1, 0.5, 0.1, 10);
    CHECK_FALSE(std::filesystem::exists(dir.path / "metrics.jsonl"));
    CHECK(train::json_number(std::numeric_limits<double>::infinity()) == "null");
    CHECK(train::json_number(-2.5) == "-2.5");
}

TEST_CASE("Run directory: holds the resolved config, which reads back the same", "[train]") {
    ScratchDir dir;
    const Config config = parse_config(kConfig, {"train.seed=9"}, "t.yaml");
    const train::RunDir made =
        train::open_run_dir((dir.path / "nested" / "run").string(), config, {});
    CHECK(made.path() == (dir.path / "nested" / "run").string());
    CHECK(made.checkpoint_dir() == (dir.path / "nested" / "run" / "checkpoints").string());
    CHECK_FALSE(made.run_id().empty());
    const std::string text = read_file(dir.path / "nested" / "run" / "config.yaml");
    CHECK(text == dump_config(config));
    CHECK_FALSE(std::filesystem::exists(dir.path / "nested" / "run" / "config.yaml.tmp"));
    const Config back = parse_config(text, {}, "config.yaml");
    CHECK(back.train.seed == 9);
    CHECK(back.model.tables[0].feature_names == std::vector<std::string>{"f_a"});
}

TEST_CASE("Run directory: a start that failed before training leaves nothing that refuses the next",
          "[train]") {
    ScratchDir dir;
    const Config config = parse_config(kConfig, {}, "t.yaml");
    const std::string run = (dir.path / "run").string();
    std::string first_id;
    {
        const train::RunDir first = train::open_run_dir(run, config, {});
        first_id = first.run_id();
    }  // no step ran: only config.yaml and run.yaml are there
    {
        const train::RunDir again = train::open_run_dir(run, config, {});
        CHECK(again.run_id() != first_id);
        std::ofstream(std::filesystem::path(run) / "metrics.jsonl") << "{}\n";  // it trained
    }
    CHECK_THROWS_WITH(train::open_run_dir(run, config, {}),
                      Contains("already holds a run (config.yaml, metrics.jsonl, run.yaml)"));
}

TEST_CASE("Run directory: a train.checkpoint_dir that holds another run's checkpoints is named",
          "[train]") {
    ScratchDir dir;
    Config config = parse_config(kConfig, {}, "t.yaml");
    config.train.checkpoint_dir = (dir.path / "shared").string();
    std::filesystem::create_directories(dir.path / "shared" / "step-00000010");
    CHECK_THROWS_WITH(
        train::open_run_dir((dir.path / "fresh").string(), config, {}),
        Contains(
            "train.checkpoint_dir '" + config.train.checkpoint_dir +
            "' already holds another run's checkpoints (1 checkpoint(s) in " +
            config.train.checkpoint_dir +
            "): give this run its own train.checkpoint_dir, or continue that run with --resume"));
}

TEST_CASE("Run directory: the default name is a timestamp, made unique", "[train]") {
    ScratchDir dir;
    const std::string first = train::default_run_dir(dir.path.string());
    const std::string stamp = std::filesystem::path(first).filename().string();
    REQUIRE(stamp.size() == 15);  // YYYYmmdd-HHMMSS
    CHECK(stamp[8] == '-');
    std::filesystem::create_directories(first);
    const std::string second = train::default_run_dir(dir.path.string());
    // Unless the clock ticked over in between, the same second gets a "-2".
    if (std::filesystem::path(second).filename().string().substr(0, 15) == stamp) {
        CHECK(second == first + "-2");
    }
}

TEST_CASE("Progress: the bar and the log line show step, rate and loss", "[train]") {
    CHECK(train::format_progress_bar(120, 600, 0.693147, 45123.0, 10) ==
          "120/600 [##........]  20%  45.1k samples/s  loss 0.69315");
    CHECK(train::format_progress_bar(7, 600, 0.5, 2.1e6, 4) ==
          "  7/600 [....]   1%  2.10M samples/s  loss 0.50000");
    CHECK(train::format_progress_bar(600, 600, 0.5, 12.0, 4) ==
          "600/600 [####] 100%  12 samples/s  loss 0.50000");
    CHECK(train::format_progress_line(120, 600, 0.693147, 45123.4) ==
          "step 120/600  loss 0.69315  45123 samples/s");
    // No loss (predict): left out of both forms.
    CHECK(train::format_progress_bar(7, 600, std::nan(""), 2.1e6, 4) ==
          "  7/600 [....]   1%  2.10M samples/s");
    CHECK(train::format_progress_line(120, 600, std::nan(""), 45123.4) ==
          "step 120/600  45123 samples/s");
    train::Progress off(10, 5, train::Progress::Mode::kOff);
    off.update(5, 0.1, 1.0);  // prints nothing, and does not fail
    CHECK(off.mode() == train::Progress::Mode::kOff);
}
