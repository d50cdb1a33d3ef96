// End to end: the real binary's error messages are about the user's input; the check that failed
// inside shardrec (condition, function, file:line) shows only with SHARDREC_LOG_LEVEL=debug, and
// an unknown SHARDREC_LOG_LEVEL is refused naming the valid levels.
#include <catch2/catch.hpp>
#include <utility>
#include <vector>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;

namespace {

// A config whose data directory does not exist: refused by an SR_CHECK in the data reader.
std::vector<std::string> missing_data_args(const std::string& out) {
    return {"train", (repo_root() / "configs" / "dlrm_criteo_kaggle.yaml").string(),
            "--set", "data.criteo_binary.path=/nonexistent/criteo",
            "--set", "train.steps=1",
            "--out", out};
}

}  // namespace

TEST_CASE("messages: a bad config's error carries no internal check text", "[e2e]") {
    const auto dir = fresh_dir("messages");
    const RunResult r = run_shardrec(missing_data_args((dir / "a").string()));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("the Criteo manifest '/nonexistent/criteo/manifest.json' does "
                                  "not exist"));
    CHECK_THAT(r.output, !Contains("failed in") && !Contains(".cpp:"));

    // With the debug log the check that failed is there for whoever debugs shardrec.
    const RunResult d =
        run_shardrec(missing_data_args((dir / "b").string()), "SHARDREC_LOG_LEVEL=debug");
    INFO(d.output);
    CHECK(d.exit_code == 1);
    CHECK_THAT(d.output, Contains("failed in") && Contains(".cpp:") && Contains("[debug]"));
}

TEST_CASE("messages: an unknown SHARDREC_LOG_LEVEL is an error naming the valid levels", "[e2e]") {
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult r = run_shardrec({"validate", config}, "SHARDREC_LOG_LEVEL=verbose");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("SHARDREC_LOG_LEVEL='verbose' is not a log level; use one of "
                                  "trace, debug, info, warn, error, off"));
    CHECK_THAT(r.output, !Contains("runtime:"));  // refused before the config is printed
}

TEST_CASE(
    "messages: an output file in a missing directory, or nothing to evaluate, is refused "
    "before any work",
    "[e2e]") {
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const auto dir = fresh_dir("messages_outputs");
    const RunResult bench = run_shardrec({"bench", config, "--steps", "1", "--warmup", "1",
                                          "--json", (dir / "missing" / "b.json").string()});
    INFO(bench.output);
    CHECK(bench.exit_code == 1);
    CHECK_THAT(bench.output,
               Contains("--json '" + (dir / "missing" / "b.json").string() + "': directory '" +
                        (dir / "missing").string() + "' does not exist"));
    CHECK_THAT(bench.output, !Contains("step time"));
    // eval checks its options before it loads a checkpoint (there is none here).
    const RunResult none = run_shardrec(
        {"eval", config, "--checkpoint", (dir / "ck").string(), "--set", "train.eval_samples=0"});
    INFO(none.output);
    CHECK(none.exit_code == 1);
    CHECK_THAT(none.output, Contains("nothing to evaluate: train.eval_samples is 0"));
    const RunResult pred = run_shardrec({"eval", config, "--checkpoint", (dir / "ck").string(),
                                         "--predictions", (dir / "missing" / "p.csv").string()});
    INFO(pred.output);
    CHECK(pred.exit_code == 1);
    CHECK_THAT(pred.output,
               Contains("--predictions '" + (dir / "missing" / "p.csv").string() + "': directory"));
}

TEST_CASE("messages: --help after an unknown ckpt subcommand names it and fails", "[e2e]") {
    const RunResult help = run_shardrec({"ckpt", "--help"});
    CHECK(help.exit_code == 0);
    CHECK_THAT(help.output, Contains("usage: shardrec ckpt"));
    const RunResult known = run_shardrec({"ckpt", "export", "--help"});
    CHECK(known.exit_code == 0);
    const RunResult unknown = run_shardrec({"ckpt", "reshard", "--help"});
    INFO(unknown.output);
    CHECK(unknown.exit_code != 0);
    CHECK_THAT(unknown.output, Contains("unknown ckpt subcommand 'reshard'"));
}

TEST_CASE("messages: a count option that is not a positive integer is named with its value",
          "[e2e]") {
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>>{
             {"--steps", "abc"}, {"--steps", "3x"}, {"--warmup", "0"}}) {
        const RunResult r = run_shardrec({"bench", config, option, value});
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, Contains(option + " needs a positive integer, got '" + value + "'"));
    }
    const RunResult plan = run_shardrec({"plan", config, "--world-size", "2x"});
    CHECK(plan.exit_code == 2);
    CHECK_THAT(plan.output, Contains("--world-size needs a positive integer, got '2x'"));
}

TEST_CASE("messages: plan --out into a missing directory is refused before planning", "[e2e]") {
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const auto dir = fresh_dir("messages_plan_out");
    const RunResult r = run_shardrec(
        {"plan", config, "--world-size", "2", "--out", (dir / "missing" / "p.yaml").string()});
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output,
               Contains("--out '" + (dir / "missing" / "p.yaml").string() + "': directory '" +
                        (dir / "missing").string() + "' does not exist"));
    CHECK_THAT(r.output, !Contains("module: sparse_arch"));
}

TEST_CASE("messages: an error at an entry whose keys came from --set names them", "[e2e]") {
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult r = run_shardrec({"plan", config, "--world-size", "2", "--planner", "config",
                                      "--set", "sharding.tables[0].ranks=[1,0]"});
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("(with --set sharding.tables[0].ranks=[1,0]): sharding.tables[0] "
                                  "('t0'): row_wise spans every rank 0..1 in order, got [1, 0]"));
}
