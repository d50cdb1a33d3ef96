// End to end: the real binary trains the quickstart config on synthetic data, learns the planted
// signal, and two runs with the same seed write bitwise-identical metrics.
#include <catch2/catch.hpp>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;

namespace {

std::vector<JsonRecord> of_kind(const std::vector<JsonRecord>& all, const std::string& kind) {
    std::vector<JsonRecord> out;
    for (const auto& r : all) {
        if (r.at("kind") == kind)
            out.push_back(r);
    }
    return out;
}

}  // namespace

TEST_CASE("train: quickstart reaches eval AUC >= 0.75 on synthetic data", "[e2e]") {
    const auto dir = fresh_dir("quickstart");
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult r = run_shardrec({"train", config, "--out", (dir / "run").string()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto metrics = read_metrics(dir / "run");
    const auto evals = of_kind(metrics, "eval");
    REQUIRE(!evals.empty());
    const double auc = std::stod(evals.back().at("auc"));
    CHECK(auc >= 0.75);
    const auto done = of_kind(metrics, "done");
    REQUIRE(done.size() == 1);
    CHECK(std::filesystem::exists(dir / "run" / "config.yaml"));
}

TEST_CASE("train: the same seed gives bitwise-identical losses and eval metrics", "[e2e]") {
    const auto dir = fresh_dir("repeat");
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    std::vector<std::vector<JsonRecord>> runs;
    for (const char* name : {"a", "b"}) {
        const RunResult r =
            run_shardrec({"train", config, "--out", (dir / name).string(), "--set",
                          "train.steps=60", "--set", "train.log_every=10", "--set",
                          "train.eval_every=30", "--set", "train.eval_samples=2048"});
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        runs.push_back(read_metrics(dir / name));
    }
    REQUIRE(runs[0].size() == runs[1].size());
    for (size_t i = 0; i < runs[0].size(); ++i) {
        for (const char* key : {"kind", "step", "loss", "lr", "auc", "ne", "accuracy", "steps"}) {
            const auto a = runs[0][i].find(key);
            if (a == runs[0][i].end())
                continue;
            INFO("line " << i << " key " << key);
            CHECK(a->second == runs[1][i].at(key));
        }
    }
}

TEST_CASE("train: every model type trains a few steps with finite losses", "[e2e]") {
    const auto dir = fresh_dir("models");
    for (const char* cfg : {"quickstart.yaml", "deepfm.yaml"}) {
        const auto config = (repo_root() / "configs" / cfg).string();
        const RunResult r =
            run_shardrec({"train", config, "--out", (dir / cfg).string(), "--set", "train.steps=5",
                          "--set", "train.log_every=1", "--set", "train.eval_samples=512"});
        INFO(cfg << "\n" << r.output);
        REQUIRE(r.exit_code == 0);
        const auto train = of_kind(read_metrics(dir / cfg), "train");
        REQUIRE(train.size() == 5);
        for (const auto& t : train)
            CHECK(std::isfinite(std::stod(t.at("loss"))));
    }
}

TEST_CASE("train: eval_samples 0 trains without evaluating", "[e2e]") {
    const auto dir = fresh_dir("no_eval");
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult r =
        run_shardrec({"train", config, "--out", (dir / "run").string(), "--set", "train.steps=4",
                      "--set", "train.eval_every=2", "--set", "train.eval_samples=0"});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("eval step") == std::string::npos);
    const auto metrics = read_metrics(dir / "run");
    CHECK(of_kind(metrics, "eval").empty());
    CHECK(of_kind(metrics, "done").size() == 1);
}

TEST_CASE("train: a bad config exits non-zero, names the key and writes no run directory",
          "[e2e]") {
    const auto dir = fresh_dir("bad");
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult r = run_shardrec(
        {"train", config, "--out", (dir / "run").string(), "--set", "model.embeding_dim=16"});
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("model.embeding_dim") != std::string::npos);
    CHECK(r.output.find("embedding_dim") != std::string::npos);
    CHECK(!std::filesystem::exists(dir / "run"));
}

TEST_CASE("train: two MPI ranks with the quickstart's mixed plan learn the signal", "[e2e][mpi]") {
    const auto dir = fresh_dir("np2");
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult r =
        run_shardrec({"train", config, "--out", (dir / "run").string(), "--set", "train.steps=300",
                      "--set", "data.batch_size=128", "--set", "train.eval_every=0"},
                     "mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto evals = of_kind(read_metrics(dir / "run"), "eval");
    REQUIRE(evals.size() == 1);
    CHECK(std::stod(evals.back().at("auc")) >= 0.75);
    CHECK(r.output.find("row_wise") != std::string::npos);  // the plan table was printed
}
