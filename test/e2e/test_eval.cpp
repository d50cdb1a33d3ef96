// `shardrec eval` end to end: a checkpoint written by a training run is evaluated by one and by
// two ranks; both print the training's own final eval metrics, and the predictions file holds
// every evaluated sample in order, from which an independent float64 AUC gives the same value.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <sstream>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;

namespace {

const std::string kMpirun2 = "timeout -k 10 300 mpirun -np 2 --allow-run-as-root --oversubscribe";

// The JSON line the eval command prints, as key -> raw value.
JsonRecord eval_line(const std::string& output) {
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("{\"kind\":\"eval\"", 0) == 0) {
            const auto dir = fresh_dir("eval_line");
            std::ofstream(dir / "metrics.jsonl") << line << "\n";
            return read_metrics(dir).at(0);
        }
    }
    FAIL("no eval line in the output");
    return {};
}

bool close(const std::string& a, const std::string& b, double rel) {
    const double x = std::stod(a);
    const double y = std::stod(b);
    return std::abs(x - y) <= rel * std::max(std::abs(x), std::abs(y)) + 1e-12;
}

// AUC by sorting and counting: positives ranked above each negative, ties count half.
double auc_of(std::vector<std::pair<double, int>> samples) {
    std::sort(samples.begin(), samples.end());
    double area = 0, pos = 0, neg = 0;
    for (size_t i = 0; i < samples.size();) {
        size_t j = i;
        double gp = 0, gn = 0;
        for (; j < samples.size() && samples[j].first == samples[i].first; ++j) {
            (samples[j].second == 1 ? gp : gn) += 1;
        }
        // Each positive of the group outranks the negatives below it and ties the group's.
        area += gp * (neg + 0.5 * gn);
        pos += gp;
        neg += gn;
        i = j;
    }
    return area / (pos * neg);
}

}  // namespace

TEST_CASE("eval: a checkpoint evaluated by 1 and 2 ranks gives the training's metrics",
          "[e2e][mpi]") {
    const auto dir = fresh_dir("eval");
    const std::string config = (repo_root() / "configs" / "quickstart.yaml").string();
    const std::vector<std::string> sets = {"--set", "train.eval_samples=1024", "--set",
                                           "data.batch_size=64"};
    std::vector<std::string> train = {"train", config,
                                      "--out", (dir / "run").string(),
                                      "--set", "train.steps=40",
                                      "--set", "train.eval_every=0",
                                      "--set", "train.checkpoint_every=40"};
    train.insert(train.end(), sets.begin(), sets.end());
    const RunResult t = run_shardrec(train, kMpirun2);
    INFO(t.output);
    REQUIRE(t.exit_code == 0);
    const auto metrics = read_metrics(dir / "run");
    JsonRecord trained;
    for (const auto& r : metrics) {
        if (r.at("kind") == "eval") {
            trained = r;
        }
    }
    REQUIRE(trained.count("auc") == 1);

    const std::string ckpt = (dir / "run" / "checkpoints").string();
    std::vector<std::string> eval1 = {"eval", config,          "--checkpoint",
                                      ckpt,   "--predictions", (dir / "pred.csv").string()};
    eval1.insert(eval1.end(), sets.begin(), sets.end());
    // One rank with the global batch of two (the same eval samples).
    eval1.push_back("--set");
    eval1.push_back("data.batch_size=128");
    const RunResult e1 = run_shardrec(eval1, "timeout -k 10 300");
    INFO(e1.output);
    REQUIRE(e1.exit_code == 0);
    std::vector<std::string> eval2 = {"eval", config, "--checkpoint", ckpt};
    eval2.insert(eval2.end(), sets.begin(), sets.end());
    const RunResult e2 = run_shardrec(eval2, kMpirun2);
    INFO(e2.output);
    REQUIRE(e2.exit_code == 0);

    const JsonRecord a = eval_line(e1.output);
    const JsonRecord b = eval_line(e2.output);
    CHECK(a.at("step") == "40");
    CHECK(a.at("count") == "1024");
    CHECK(b.at("count") == "1024");
    // Two ranks reproduce the training's evaluation (same ranks, same plan) exactly; one rank
    // to float rounding of the reductions.
    for (const char* key : {"loss", "auc", "ne", "accuracy", "calibration"}) {
        INFO(key);
        CHECK(b.at(key) == trained.at(key));
        CHECK(close(a.at(key), b.at(key), std::string(key) == "auc" ? 1e-3 : 1e-4));
    }

    std::ifstream in(dir / "pred.csv");
    std::string line;
    REQUIRE(std::getline(in, line));
    CHECK(line == "label,score");
    std::vector<std::pair<double, int>> samples;
    double sum_score = 0, sum_label = 0;
    while (std::getline(in, line)) {
        const size_t comma = line.find(',');
        REQUIRE(comma != std::string::npos);
        const int label = std::stoi(line.substr(0, comma));
        const double score = std::stod(line.substr(comma + 1));
        REQUIRE((label == 0 || label == 1));
        REQUIRE((score > 0 && score < 1));
        samples.emplace_back(score, label);
        sum_score += score;
        sum_label += label;
    }
    CHECK(samples.size() == 1024);
    CHECK(!std::filesystem::exists(dir / "pred.csv.tmp"));
    // Scores are printed to 9 digits: a near-tie of two logits may become a tie (half a pair).
    CHECK(std::abs(auc_of(samples) - std::stod(a.at("auc"))) <= 1e-4);
    CHECK(std::abs(sum_score / sum_label - std::stod(a.at("calibration"))) <= 1e-6);
}

TEST_CASE("eval: a missing checkpoint or a checkpoint of another model is refused",
          "[e2e][faults]") {
    const auto dir = fresh_dir("eval_bad");
    const std::string config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult missing = run_shardrec(
        {"eval", config, "--checkpoint", (dir / "none").string()}, "timeout -k 10 300");
    INFO(missing.output);
    CHECK(missing.exit_code == 1);
    CHECK_THAT(missing.output, Contains((dir / "none").string()));
    const RunResult usage = run_shardrec({"eval", config}, "timeout -k 10 300");
    CHECK(usage.exit_code == 2);
    CHECK_THAT(usage.output, Contains("--checkpoint"));
    // A checkpoint of a model with other embedding dims.
    const RunResult t = run_shardrec({"train", config, "--out", (dir / "run").string(), "--set",
                                      "train.steps=2", "--set", "train.checkpoint_every=2", "--set",
                                      "train.eval_samples=64", "--set", "data.batch_size=16"},
                                     "timeout -k 10 300");
    INFO(t.output);
    REQUIRE(t.exit_code == 0);
    const RunResult other =
        run_shardrec({"eval", config, "--checkpoint", (dir / "run" / "checkpoints").string(),
                      "--set", "model.embedding_dim=8", "--set", "model.bottom_mlp=[64, 8]"},
                     kMpirun2);
    INFO(other.output);
    CHECK(other.exit_code != 0);
    CHECK(other.exit_code != 124);
    CHECK_THAT(other.output, Contains("t0"));
}
