// The limits of a run as a hostile user meets them, with the real binary under mpirun: a stalled
// rank ends the job within runtime.comm_timeout_s and is named; SIGTERM and SIGINT end every rank
// with a message and a non-zero exit; any world size trains on the CPU; runtime.threads is bounded
// by the CPUs the process may use. Every run is wrapped in `timeout`, so a hang fails (exit 124).
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "engine/train/checkpoint.h"
#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;

namespace {

const std::string kTimeout = "timeout -k 10 300 ";
const std::string kMpirun = "mpirun --allow-run-as-root --oversubscribe";

std::string quickstart() {
    // Absolute: the signal tests run from their own directory.
    return std::filesystem::absolute(repo_root() / "configs" / "quickstart.yaml").string();
}

std::string host_name() {
    char buf[256] = {};
    gethostname(buf, sizeof(buf) - 1);
    return buf;
}

// Seconds since local midnight of a log line's "[HH:MM:SS.mmm]" stamp; -1 when no line of
// `output` contains `needle`.
double stamp_of(const std::string& output, const std::string& needle) {
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line)) {
        if (line.find(needle) != std::string::npos && line.size() > 13 && line[0] == '[') {
            return std::stoi(line.substr(1, 2)) * 3600.0 + std::stoi(line.substr(4, 2)) * 60.0 +
                   std::stod(line.substr(7, 6));
        }
    }
    return -1;
}

double now_of_day() {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    localtime_r(&t, &tm);
    const double frac =
        std::chrono::duration<double>(now.time_since_epoch()).count() - static_cast<double>(t);
    return tm.tm_hour * 3600.0 + tm.tm_min * 60.0 + tm.tm_sec + frac;
}

std::string quoted(const std::vector<std::string>& args) {
    std::string out;
    for (const auto& a : args) {
        out += " '" + a + "'";
    }
    return out;
}

RunResult run_command(const std::string& cmd) {
    RunResult r;
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
        r.output.append(buf, n);
    }
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

// A long run that logs every 100 steps: mpirun stops forwarding output while it ends a job, and a
// rank that logs every step would block on its full stderr pipe until mpirun kills it.
std::vector<std::string> long_train() {
    return small_train_args("run", 100000, {"train.log_every=100"});
}

std::string bin() {
    const char* b = std::getenv("SHARDREC_BIN");
    return b == nullptr ? "shardrec" : b;
}

// Starts `command` in the background, waits until run/metrics.jsonl has 2 train lines, sends
// `signal` (several, space-separated, are sent 50 ms apart) to `target` ("job": the launched
// process; "rank1": the rank-1 process under mpirun), and reports the exit code and the seconds
// from the signal to the end.
struct SignalResult {
    int exit_code = -1;
    double seconds = -1;
    std::string output;
};

SignalResult run_and_signal(const std::filesystem::path& dir,
                            const std::string& command,
                            const std::string& signal,
                            const std::string& target) {
    const auto script = dir / "signal.sh";
    std::ofstream(script)
        << "cd '" << dir.string() << "'\n"
        << command << " > out.log 2>&1 &\n"
        << "job=$!\n"
        << "for i in $(seq 1200); do\n"
        << "  [ \"$(grep -c '\"kind\":\"train\"' run/metrics.jsonl 2>/dev/null)\" -ge 2 ] "
           "2>/dev/null && break\n"
        << "  kill -0 $job || break\n"
        << "  sleep 0.1\n"
        << "done\n"
        << "pid=$job\n"
        << "if [ " << target << " = rank1 ]; then\n"
        << "  for c in $(pgrep -P $job); do\n"
        << "    tr '\\0' '\\n' < /proc/$c/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && pid=$c\n"
        << "  done\n"
        << "fi\n"
        << "start=$(date +%s%N)\n"
        // A moment between the signals: two of a kind pending together would be delivered once.
        << "for s in " << signal << "; do kill -$s $pid 2>/dev/null; sleep 0.05; done\n"
        << "wait $job; rc=$?\n"
        << "end=$(date +%s%N)\n"
        << "echo \"exit=$rc\"; echo \"ms=$(( (end - start) / 1000000 ))\"\n";
    const RunResult r = run_command(kTimeout + "bash '" + script.string() + "' 2>&1");
    SignalResult out;
    std::ifstream log(dir / "out.log");
    out.output = std::string((std::istreambuf_iterator<char>(log)), {}) + r.output;
    const auto exit_at = r.output.find("exit=");
    const auto ms_at = r.output.find("ms=");
    if (exit_at != std::string::npos && ms_at != std::string::npos) {
        out.exit_code = std::stoi(r.output.substr(exit_at + 5));
        out.seconds = 1e-3 * std::stod(r.output.substr(ms_at + 3));
    }
    return out;
}

}  // namespace

TEST_CASE("limits: a stalled rank ends every rank within 1.5 comm timeouts, named with its host",
          "[e2e][limits][mpi]") {
    const auto dir = fresh_dir("limits_stall");
    constexpr double kTimeoutS = 4;
    const RunResult r = run_shardrec(small_train_args(dir / "run", 6, {"runtime.comm_timeout_s=4"}),
                                     kTimeout + "env SHARDREC_FAULT_INJECT=1:3:stall " + kMpirun +
                                         " -x SHARDREC_FAULT_INJECT -np 2");
    const double end = now_of_day();
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK_THAT(r.output, Contains("rank 0/2 on") && Contains("did not complete within 4 s") &&
                             Contains("rank 1 on host " + host_name() +
                                      " has not reached it (it computes outside communication"));
    const double stalled = stamp_of(r.output, "fault injection: stalls at train step 3");
    const double failed = stamp_of(r.output, "did not complete within 4 s");
    REQUIRE(stalled >= 0);
    REQUIRE(failed >= 0);
    // Not one timeout more per collective left in flight while the error unwinds.
    CHECK(failed - stalled < 1.5 * kTimeoutS);
    CHECK(end - stalled < 1.5 * kTimeoutS + 1.0);
}

TEST_CASE("limits: SIGTERM to mpirun ends every rank, naming the signal and the step",
          "[e2e][limits][mpi]") {
    const auto dir = fresh_dir("limits_sigterm");
    const SignalResult r = run_and_signal(
        dir, "exec " + kMpirun + " -np 2 '" + bin() + "'" + quoted(long_train()), "TERM", "job");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK(r.seconds >= 0);
    CHECK(r.seconds < 5);
    CHECK_THAT(r.output, Contains("SIGTERM (signal 15) ended the run at train step"));
}

TEST_CASE("limits: SIGTERM to one rank stops every rank at the same step", "[e2e][limits][mpi]") {
    const auto dir = fresh_dir("limits_sigterm_rank");
    const SignalResult r = run_and_signal(
        dir, "exec " + kMpirun + " -np 2 '" + bin() + "'" + quoted(long_train()), "TERM", "rank1");
    INFO(r.output);
    CHECK(r.exit_code == 128 + 15);
    CHECK(r.seconds >= 0);
    CHECK(r.seconds < 5);
    CHECK_THAT(r.output, Contains("SIGTERM (signal 15) ended the run at train step") &&
                             Contains("on every rank"));
    CHECK_THAT(r.output, !Contains("MPI_ABORT"));
}

TEST_CASE("limits: SIGINT ends a one-process run with its message and exit 130", "[e2e][limits]") {
    const auto dir = fresh_dir("limits_sigint");
    const SignalResult r =
        run_and_signal(dir, "exec '" + bin() + "'" + quoted(long_train()), "INT", "job");
    INFO(r.output);
    CHECK(r.exit_code == 128 + 2);
    CHECK(r.seconds >= 0);
    CHECK(r.seconds < 5);
    CHECK_THAT(r.output, Contains("SIGINT (signal 2) ended the run at train step"));
}

TEST_CASE("limits: a run stopped by a signal saves its last finished step first", "[e2e][limits]") {
    // SIGTERM (preemption, scancel) and SIGUSR1 (SLURM's --signal warning before a time limit),
    // with periodic checkpoints and without them (train.checkpoint_every 0, the default): a stop
    // saves either way, so a requeued job's `--resume auto` finds its step.
    const std::string signal = GENERATE(std::string("TERM"), std::string("USR1"));
    const bool periodic = GENERATE(true, false);
    INFO(signal << (periodic ? ", checkpoint_every 1000000" : ", no checkpoint_every"));
    const auto dir = fresh_dir("limits_" + signal + "_checkpoint");
    auto args = long_train();
    if (periodic)
        args.insert(args.end(), {"--set", "train.checkpoint_every=1000000"});
    const SignalResult r =
        run_and_signal(dir, "exec '" + bin() + "'" + quoted(args), signal, "job");
    INFO(r.output);
    CHECK(r.exit_code == 128 + (signal == "TERM" ? 15 : 10));
    CHECK_THAT(r.output, Contains("SIG" + signal + " (signal "));
    const auto at = r.output.find("ended the run at train step ");
    REQUIRE(at != std::string::npos);
    const int64_t stopped = std::stoll(r.output.substr(at + 28));
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(stopped - 1));
    CHECK(std::filesystem::exists(dir / "run" / "checkpoints" / name / "manifest.yaml"));
    CHECK_THAT(r.output,
               Contains("step " + std::to_string(stopped - 1) + " is saved in run/checkpoints"));
}

TEST_CASE("limits: a signal during an evaluation cuts it short and saves the step",
          "[e2e][limits][mpi]") {
    // An evaluation of 20 M samples takes minutes here; the stop is agreed before each of its
    // batches, so the run ends within seconds, the step before the evaluation saved.
    const bool mpi = GENERATE(false, true);
    INFO((mpi ? "SIGTERM to rank 1 of 2" : "SIGTERM to one process"));
    const auto dir = fresh_dir("limits_stop_in_eval");
    const auto args = small_train_args(
        "run", 100000, {"train.log_every=1", "train.eval_every=2", "train.eval_samples=20000000"});
    const std::string launch =
        mpi ? "exec " + kMpirun + " -np 2 '" + bin() + "'" : "exec '" + bin() + "'";
    const SignalResult r =
        run_and_signal(dir, launch + quoted(args), "TERM", mpi ? "rank1" : "job");
    INFO(r.output);
    CHECK(r.exit_code == 128 + 15);
    CHECK(r.seconds >= 0);
    CHECK(r.seconds < 10);
    CHECK_THAT(r.output, Contains("eval step 2: cut short by SIGTERM") &&
                             Contains("ended the run at train step 3") &&
                             Contains("step 2 is saved in"));
    CHECK(std::filesystem::exists(dir / "run" / "checkpoints" / "step-00000002" / "manifest.yaml"));
    CHECK_THAT(read_file(dir / "run" / "metrics.jsonl"), !Contains("\"kind\":\"eval\""));
}

// The sparse_dist pipeline remaps a managed-collision table's batch while the batch before
// trains, so a stop finds it holding batches whose remap ran: it trains them, then saves, and the
// checkpoint's remap state is that of its own step.
TEST_CASE(
    "limits: a signal to a run with a managed-collision table saves after the remapped batches",
    "[e2e][limits][mc]") {
    const auto dir = fresh_dir("limits_mc_stop");
    const auto args = small_train_args(
        "run", 100000,
        {"train.log_every=100", "train.pipeline=sparse_dist", "train.checkpoint_every=1000000",
         "data.synthetic.raw_id_drift=4", "model.tables[4].managed_collision.zch_size=100",
         "model.tables[4].managed_collision.mch_size=900",
         "model.tables[4].managed_collision.eviction_interval=2"});
    const SignalResult r =
        run_and_signal(dir, "exec '" + bin() + "'" + quoted(args), "TERM", "job");
    INFO(r.output);
    CHECK(r.exit_code == 128 + 15);
    const auto at = r.output.find("ended the run at train step ");
    REQUIRE(at != std::string::npos);
    const int64_t stopped = std::stoll(r.output.substr(at + 28));
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(stopped - 1));
    const auto ckpt = dir / "run" / "checkpoints" / name;
    REQUIRE(std::filesystem::exists(ckpt / "manifest.yaml"));
    // The state's first value is its module's step (ManagedCollisionTables::state_tensor).
    const std::string state = read_file(ckpt / shardrec::train::managed_collision_file("t4", 0));
    REQUIRE(state.size() >= 8);
    int64_t module_step = -1;
    std::memcpy(&module_step, state.data(), 8);
    CHECK(module_step == stopped - 1);
}

TEST_CASE("limits: a repeated SIGTERM or SIGUSR1 does not cut the save short", "[e2e][limits]") {
    // SLURM signals every process of a job and the launcher passes its own signal on, so a rank
    // gets the same stop twice; only a second SIGINT (Ctrl-C) ends a run at once.
    const std::string signals = GENERATE(std::string("TERM TERM"), std::string("USR1 TERM USR1"));
    INFO(signals);
    const auto dir = fresh_dir("limits_repeated_signal");
    auto args = long_train();
    args.insert(args.end(), {"--set", "train.checkpoint_every=1000000"});
    const SignalResult r =
        run_and_signal(dir, "exec '" + bin() + "'" + quoted(args), signals, "job");
    INFO(r.output);
    // Signals sent back to back to a process of several threads arrive in no set order: the
    // run ends by whichever came first, TERM or USR1.
    CHECK((r.exit_code == 128 + 15 || (signals[0] == 'U' && r.exit_code == 128 + 10)));
    const auto at = r.output.find("ended the run at train step ");
    REQUIRE(at != std::string::npos);
    const int64_t stopped = std::stoll(r.output.substr(at + 28));
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(stopped - 1));
    CHECK(std::filesystem::exists(dir / "run" / "checkpoints" / name / "manifest.yaml"));
}

TEST_CASE("limits: a second SIGINT ends a run at once and without its message", "[e2e][limits]") {
    const auto dir = fresh_dir("limits_sigint_twice");
    // Steps long enough (a large batch) that the second SIGINT, 50 ms after the first, comes
    // while the run still works towards the step it would stop at.
    auto args = long_train();
    args.insert(args.end(), {"--set", "data.batch_size=65536", "--set", "train.log_every=1"});
    const SignalResult r =
        run_and_signal(dir, "exec '" + bin() + "'" + quoted(args), "INT INT", "job");
    INFO(r.output);
    CHECK(r.exit_code == 128 + 2);
    CHECK_THAT(r.output, !Contains("ended the run at train step"));
}

TEST_CASE("limits: a SHARDREC_LOCAL_SIZE that does not divide the ranks fails each, named",
          "[e2e][limits][mpi]") {
    const RunResult r = run_shardrec({"validate", quickstart()},
                                     "SHARDREC_LOCAL_SIZE=2 " + kTimeout + kMpirun + " -np 3");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    for (const char* rank : {"rank 0/3 on ", "rank 1/3 on ", "rank 2/3 on "})
        CHECK_THAT(r.output, Contains(std::string(rank)) &&
                                 Contains("SHARDREC_LOCAL_SIZE=2 must divide the world size 3"));
    CHECK_THAT(r.output, !Contains("rank 0/1 on"));
}

TEST_CASE("limits: three ranks train the default config on the CPU", "[e2e][limits][mpi]") {
    const auto dir = fresh_dir("limits_np3");
    const RunResult r =
        run_shardrec(small_train_args(dir / "run", 4), kTimeout + kMpirun + " -np 3");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto metrics = read_metrics(dir / "run");
    CHECK(std::count_if(metrics.begin(), metrics.end(),
                        [](const JsonRecord& m) { return m.at("kind") == "train"; }) == 4);
}

TEST_CASE("limits: a plan for another world size says so before anything else",
          "[e2e][limits][mpi]") {
    const auto dir = fresh_dir("limits_plan_world");
    const RunResult plan = run_shardrec(
        {"plan", quickstart(), "--world-size", "2", "--out", (dir / "plan2.yaml").string()},
        kTimeout);
    INFO(plan.output);
    REQUIRE(plan.exit_code == 0);
    const RunResult r = run_shardrec(
        small_train_args(
            dir / "run", 4,
            {"sharding.plan_file=" + (dir / "plan2.yaml").string(), "sharding.tables=[]"}),
        kTimeout + kMpirun + " -np 3");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);
    CHECK_THAT(r.output, Contains("plan2.yaml") &&
                             Contains("the plan is for 2 ranks, this run has 3") &&
                             Contains("--world-size 3"));
    // The world size alone: the ranks per node and shards made for that world are not listed.
    CHECK_THAT(r.output, !Contains("ranks per node") && !Contains("shards"));
}

TEST_CASE("limits: runtime.threads beyond the CPUs the process may use is refused, naming them",
          "[e2e][limits]") {
    cpu_set_t set;
    CPU_ZERO(&set);
    REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
    const int cpus = CPU_COUNT(&set);
    for (const char* command : {"validate", "train"}) {
        const auto dir = fresh_dir(std::string("limits_threads_") + command);
        std::vector<std::string> args = {command, quickstart(), "--set", "runtime.threads=100000"};
        if (std::string(command) == "train") {
            args.insert(args.end(), {"--out", (dir / "run").string()});
        }
        const RunResult r = run_shardrec(args, kTimeout);
        INFO(r.output);
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, Contains("runtime.threads") &&
                                 Contains("100000 threads exceed the " + std::to_string(cpus) +
                                          " CPUs this process may run on"));
    }
    // Under taskset the process may use one CPU: two threads are already too many.
    const RunResult r = run_shardrec({"validate", quickstart(), "--set", "runtime.threads=2"},
                                     kTimeout + "taskset -c 0");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("2 threads exceed the 1 CPUs this process may run on") &&
                             Contains("use at most 1"));
    const RunResult ok = run_shardrec({"validate", quickstart(), "--set", "runtime.threads=1"},
                                      kTimeout + "taskset -c 0");
    INFO(ok.output);
    CHECK(ok.exit_code == 0);
    // The environment's thread count is the launcher's to give: taken, but said.
    const auto dir = fresh_dir("limits_threads_env");
    const RunResult env = run_shardrec(small_train_args(dir / "run", 2),
                                       "OMP_NUM_THREADS=2 " + kTimeout + "taskset -c 0");
    INFO(env.output);
    CHECK(env.exit_code == 0);
    CHECK_THAT(env.output, Contains("OMP_NUM_THREADS=2 exceeds the 1 CPU(s) this process may run "
                                    "on (sched_getaffinity)"));
}
