// Bad input and faults, end to end: the real binary under mpirun, one rank made to misbehave with
// the test-only SHARDREC_FAULT_INJECT (engine/train/fault_inject.h). Every failure must end the
// whole run non-zero with one clear message that names what, where and the rank; every run is
// wrapped in `timeout` so that a hang fails the test (exit 124) instead of blocking CI.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;

namespace {

// A hang would be killed here; the runs themselves take a few seconds.
const std::string kTimeout = "timeout -k 10 300 ";

std::string mpirun(int np, const std::string& env = "") {
    std::string prefix = kTimeout + (env.empty() ? "" : "env " + env + " ");
    prefix += "mpirun -np " + std::to_string(np) + " --allow-run-as-root --oversubscribe";
    if (!env.empty()) {
        // Local ranks inherit mpirun's environment; -x says so explicitly.
        for (const char* name : {"SHARDREC_FAULT_INJECT", "SHARDREC_COMM_TIMEOUT_S"}) {
            if (env.find(name) != std::string::npos) {
                prefix += std::string(" -x ") + name;
            }
        }
    }
    return prefix;
}

// The quickstart model, six small steps.
std::vector<std::string> small_train(const std::filesystem::path& run,
                                     const std::vector<std::string>& sets = {}) {
    return small_train_args(run, 6, sets);
}

std::vector<JsonRecord> of_kind(const std::vector<JsonRecord>& all, const std::string& kind) {
    std::vector<JsonRecord> out;
    for (const auto& r : all) {
        if (r.at("kind") == kind) {
            out.push_back(r);
        }
    }
    return out;
}

}  // namespace

TEST_CASE("faults: an out-of-range id under bounds_check fatal names it and ends every rank",
          "[e2e][faults]") {
    const auto dir = fresh_dir("bounds_fatal");
    const RunResult r =
        run_shardrec(small_train(dir / "run"), mpirun(2, "SHARDREC_FAULT_INJECT=1:3:bad_id"));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);  // not a hang
    CHECK_THAT(r.output, Contains("train step 3, rank 1") && Contains("table 't0'") &&
                             Contains("feature 'f_t0'") && Contains("id 20000 ") &&
                             Contains("[0, 20000)") && Contains("runtime.bounds_check: fatal"));
}

TEST_CASE("faults: bounds_check warning reads the id as row 0, logs and counts it",
          "[e2e][faults]") {
    const auto dir = fresh_dir("bounds_warning");
    const RunResult r = run_shardrec(small_train(dir / "run", {"runtime.bounds_check=warning"}),
                                     mpirun(2, "SHARDREC_FAULT_INJECT=*:2:bad_id,0:4:bad_id"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("train step 2: table 't0' feature 'f_t0'") &&
                             Contains("id 20000 is outside [0, 20000), read as row 0") &&
                             Contains("train step 4"));
    // Rank 0 replaced two ids, rank 1 one; each rank reports its count at the end.
    CHECK_THAT(r.output, Contains("2 ids outside their tables were read as row 0") &&
                             Contains("1 ids outside their tables were read as row 0"));
    CHECK(of_kind(read_metrics(dir / "run"), "train").size() == 6);
}

TEST_CASE("faults: NaN in dense features stops every rank under nan_policy stop", "[e2e][faults]") {
    const auto dir = fresh_dir("nan_stop");
    const RunResult r =
        run_shardrec(small_train(dir / "run"), mpirun(2, "SHARDREC_FAULT_INJECT=1:4:nan_dense"));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK_THAT(r.output, Contains("train step 4, rank 1: dense feature 0 of sample 0") &&
                             Contains("nan") && Contains("runtime.nan_policy: stop"));
    // The steps before the fault were logged; none after it.
    CHECK(of_kind(read_metrics(dir / "run"), "train").size() == 3);
}

TEST_CASE("faults: nan_policy skip_batch skips the batch on every rank and trains on",
          "[e2e][faults]") {
    const auto dir = fresh_dir("nan_skip");
    const RunResult r = run_shardrec(small_train(dir / "run", {"runtime.nan_policy=skip_batch"}),
                                     mpirun(2, "SHARDREC_FAULT_INJECT=1:4:nan_dense"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("train step 4: a rank saw NaN or Inf; the batch is skipped") &&
                             Contains("1 batches were skipped"));
    const auto metrics = read_metrics(dir / "run");
    const auto train = of_kind(metrics, "train");
    REQUIRE(train.size() == 6);
    CHECK(train[3].at("loss") == "null");  // the skipped step
    CHECK(std::isfinite(std::stod(train[5].at("loss"))));
    const auto evals = of_kind(metrics, "eval");
    REQUIRE(evals.size() == 1);
    CHECK(std::isfinite(std::stod(evals[0].at("auc"))));
}

TEST_CASE(
    "faults: a stalled rank makes its peer fail within runtime.comm_timeout_s; the last "
    "checkpoint stays intact",
    "[e2e][faults][mpi]") {
    const auto dir = fresh_dir("stall");
    const RunResult r = run_shardrec(
        small_train(dir / "run", {"runtime.comm_timeout_s=3", "train.checkpoint_every=2"}),
        mpirun(2, "SHARDREC_FAULT_INJECT=1:5:stall"));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);  // ended by the comm timeout, not by the test's timeout
    CHECK_THAT(r.output, Contains("[r1/2 ") && Contains("fault injection: stalls at train step 5"));
    CHECK_THAT(r.output, Contains("rank 0/2") && Contains("did not complete within 3 s"));
    CHECK(of_kind(read_metrics(dir / "run"), "train").size() == 4);
    // The checkpoint of step 4 was complete before the stall: it is there and loads; no later
    // step-<N> exists.
    const auto ckpt = dir / "run" / "checkpoints";
    CHECK(std::filesystem::exists(ckpt / "step-00000004" / "manifest.yaml"));
    CHECK(!std::filesystem::exists(ckpt / "step-00000006"));
    // Loading it checks every file's size and CRC-32 against the manifest.
    const RunResult check =
        run_shardrec({"eval", (repo_root() / "configs" / "quickstart.yaml").string(),
                      "--checkpoint", (ckpt / "step-00000004").string(), "--set",
                      "train.eval_samples=64", "--set", "data.batch_size=32"},
                     kTimeout);
    INFO(check.output);
    CHECK(check.exit_code == 0);
    CHECK_THAT(check.output, Contains("\"step\":4,"));
}

// Open MPI can hold the waiting thread inside a call, where the wait cannot time out; the wait
// watchdog fails it instead and ends the process. Rank 1 stalls, so that only rank 0's watchdog
// can end the run.
TEST_CASE("faults: a wait held past runtime.comm_timeout_s is ended by the wait watchdog",
          "[e2e][faults][mpi]") {
    const auto dir = fresh_dir("held_wait");
    const RunResult r = run_shardrec(small_train(dir / "run", {"runtime.comm_timeout_s=2"}),
                                     mpirun(2, "SHARDREC_FAULT_INJECT=0:3:held_wait,1:3:stall"));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK_THAT(r.output, Contains("fault injection: holds its first wait of train step 3"));
    CHECK_THAT(r.output, Contains("rank 0/2") && Contains("did not complete within 2 s") &&
                             Contains("the waiting thread is held inside MPI") &&
                             Contains("rank 1 on host ") &&
                             Contains("has not reached it (it "
                                      "computes"));
}

TEST_CASE("faults: SHARDREC_COMM_TIMEOUT_S overrides runtime.comm_timeout_s",
          "[e2e][faults][mpi]") {
    const auto dir = fresh_dir("stall_env");
    const RunResult r =
        run_shardrec(small_train(dir / "run", {"runtime.comm_timeout_s=100000"}),
                     mpirun(2, "SHARDREC_FAULT_INJECT=0:2:stall SHARDREC_COMM_TIMEOUT_S=2"));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK_THAT(r.output, Contains("rank 1/2") && Contains("did not complete within 2 s"));
}

TEST_CASE("faults: a rank that dies ends the whole run non-zero", "[e2e][faults][mpi]") {
    const auto dir = fresh_dir("exit");
    const RunResult r =
        run_shardrec(small_train(dir / "run"), mpirun(2, "SHARDREC_FAULT_INJECT=1:3:exit"));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK_THAT(r.output, Contains("[r1/2 ") && Contains("fault injection: exits at train step 3"));
}

// mpirun ends the other ranks of a job whose rank died (SIGTERM, then SIGKILL after
// odls_base_sigkill_timeout, 10 s in the launch scripts): a rank it stops while it waits for the
// dead one says in which collective and for which rank on which host.
TEST_CASE("faults: ranks stopped while they wait for a dead rank name the collective and it",
          "[e2e][faults][mpi]") {
    const auto dir = fresh_dir("dead_peer");
    const RunResult r = run_shardrec(
        small_train(dir / "run", {"runtime.comm_timeout_s=60"}),
        mpirun(2, "SHARDREC_FAULT_INJECT=1:3:exit") + " --mca odls_base_sigkill_timeout 3");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK_THAT(r.output, Contains("rank 0 on host ") &&
                             Contains(": asked to stop (SIGTERM) while waiting") &&
                             Contains("of group 'world': rank 1 on host ") &&
                             Contains("has not reached it (its process is gone: host "));
}

TEST_CASE("faults: a malformed SHARDREC_FAULT_INJECT is an error naming it", "[e2e][faults]") {
    const auto dir = fresh_dir("bad_inject");
    const RunResult r =
        run_shardrec(small_train(dir / "run"), kTimeout + "env SHARDREC_FAULT_INJECT=1:x:stall");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("SHARDREC_FAULT_INJECT: step 'x'"));
}

TEST_CASE("faults: an error in the final evaluation leaves the final checkpoint written",
          "[e2e][faults][mpi]") {
    const auto dir = fresh_dir("eval_error");
    const RunResult r = run_shardrec(small_train(dir / "run", {"train.checkpoint_every=4"}),
                                     mpirun(2, "SHARDREC_FAULT_INJECT=*:6:eval_error"));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.output, Contains("the evaluation after train step 6 fails"));
    // Step 6 is not a multiple of checkpoint_every: it is saved as the last step, before the
    // evaluation.
    CHECK(std::filesystem::exists(dir / "run" / "checkpoints" / "step-00000006" / "manifest.yaml"));
    CHECK(std::filesystem::exists(dir / "run" / "checkpoints" / "step-00000004" / "manifest.yaml"));
}

TEST_CASE("train: train.target_auc ends training once an evaluation reaches it", "[e2e]") {
    const auto dir = fresh_dir("target_auc");
    const RunResult r =
        run_shardrec({"train", (repo_root() / "configs" / "quickstart.yaml").string(), "--out",
                      (dir / "run").string(), "--set", "train.steps=400", "--set",
                      "train.eval_every=20", "--set", "train.eval_samples=2048", "--set",
                      "train.target_auc=0.7", "--set", "data.batch_size=64"},
                     kTimeout);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto metrics = read_metrics(dir / "run");
    const auto target = of_kind(metrics, "target_reached");
    REQUIRE(target.size() == 1);
    const int64_t step = std::stoll(target[0].at("step"));
    CHECK(step < 400);
    CHECK(step % 20 == 0);
    CHECK(std::stod(target[0].at("auc")) >= 0.7);
    CHECK(target[0].at("target_auc") == "0.7");
    // The evaluation before it was below the target; the run stopped right there.
    const auto evals = of_kind(metrics, "eval");
    REQUIRE(!evals.empty());
    CHECK(evals.back().at("step") == target[0].at("step"));
    for (size_t i = 0; i + 1 < evals.size(); ++i) {
        CHECK(std::stod(evals[i].at("auc")) < 0.7);
    }
    const auto done = of_kind(metrics, "done");
    REQUIRE(done.size() == 1);
    CHECK(done[0].at("steps") == target[0].at("step"));
    CHECK(evals.back().count("calibration") == 1);
}

TEST_CASE("errors: missing config, plan and topology files are named; every rank exits non-zero",
          "[e2e][faults]") {
    const auto dir = fresh_dir("missing");
    const std::string config = (repo_root() / "configs" / "quickstart.yaml").string();
    {
        const RunResult r = run_shardrec({"train", (dir / "nope.yaml").string()}, mpirun(2));
        INFO(r.output);
        CHECK(r.exit_code != 0);
        CHECK_THAT(r.output, Contains((dir / "nope.yaml").string()));
    }
    {
        const RunResult r = run_shardrec(
            small_train(dir / "run_plan", {"sharding.plan_file=" + (dir / "plan.yaml").string()}),
            mpirun(2));
        INFO(r.output);
        CHECK(r.exit_code != 0);
        CHECK_THAT(r.output, Contains((dir / "plan.yaml").string()));
    }
    {
        const RunResult r = run_shardrec(
            small_train(dir / "run_topo", {"sharding.planner=auto",
                                           "sharding.topology=" + (dir / "topo.yaml").string()}),
            mpirun(2));
        INFO(r.output);
        CHECK(r.exit_code != 0);
        CHECK_THAT(r.output, Contains((dir / "topo.yaml").string()));
    }
}

TEST_CASE("errors: a plan for another world size or other tables is refused", "[e2e][faults]") {
    const auto dir = fresh_dir("plan_mismatch");
    const std::string config = (repo_root() / "configs" / "quickstart.yaml").string();
    // A plan made for 4 ranks, used by 2.
    const RunResult plan = run_shardrec(
        {"plan", config, "--world-size", "4", "--out", (dir / "plan4.yaml").string()}, kTimeout);
    INFO(plan.output);
    REQUIRE(plan.exit_code == 0);
    const RunResult r = run_shardrec(
        small_train(dir / "run",
                    {"sharding.plan_file=" + (dir / "plan4.yaml").string(), "sharding.tables=[]"}),
        mpirun(2));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK_THAT(r.output,
               Contains("plan4.yaml") && Contains("the plan is for 4 ranks, this run has 2"));
    // A plan for 2 ranks naming a table the model does not have.
    const RunResult plan2 = run_shardrec(
        {"plan", config, "--world-size", "2", "--out", (dir / "plan2.yaml").string()}, kTimeout);
    INFO(plan2.output);
    REQUIRE(plan2.exit_code == 0);
    std::ifstream in(dir / "plan2.yaml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("t3");
    REQUIRE(at != std::string::npos);
    text.replace(at, 2, "zz");
    std::ofstream(dir / "plan_tables.yaml") << text;
    const RunResult r2 = run_shardrec(
        small_train(dir / "run2", {"sharding.plan_file=" + (dir / "plan_tables.yaml").string(),
                                   "sharding.tables=[]"}),
        mpirun(2));
    INFO(r2.output);
    CHECK(r2.exit_code != 0);
    CHECK(r2.exit_code != 124);
    CHECK_THAT(r2.output, Contains("plan_tables.yaml") && Contains("'zz'"));
}
