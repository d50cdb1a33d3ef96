// Quantized comms in training: the quickstart on two ranks (mpirun, the real binary) for 200
// steps with fp16 or bf16 pooled collectives and dense all-reduce stays close to f32 comms: eval
// AUC within 0.002 and eval loss within 1% (measured: about 0.0003 and 0.3%; the 1000-step runs
// of bench/results/qcomms-* are within 0.001 AUC). fp8 pooled values with a bf16 all-reduce too.
#include <catch2/catch.hpp>
#include <cmath>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;

namespace {

struct Eval {
    double auc = 0, loss = 0;
};

Eval train_two_ranks(const std::string& name, const std::vector<std::string>& sets) {
    const auto run = fresh_dir("qcomms_" + name);
    const auto config = std::filesystem::absolute(repo_root() / "configs" / "quickstart.yaml");
    std::vector<std::string> args = {"train", config.string(),      "--out", run.string(),
                                     "--set", "train.steps=200",    "--set", "train.eval_every=0",
                                     "--set", "train.log_every=100"};
    for (const auto& s : sets) {
        args.push_back("--set");
        args.push_back(s);
    }
    const RunResult r = run_shardrec(args, "mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Eval e;
    for (const auto& rec : read_metrics(run)) {
        if (rec.count("kind") && rec.at("kind") == "eval") {
            e.auc = std::stod(rec.at("auc"));
            e.loss = std::stod(rec.at("loss"));
        }
    }
    REQUIRE(e.auc > 0.7);  // it trained
    return e;
}

}  // namespace

TEST_CASE("qcomms: fp16, bf16 and fp8 comms train the quickstart as f32 comms do", "[e2e][mpi]") {
    const Eval f32 = train_two_ranks("fp32", {});
    for (const auto& [name, forward, backward, allreduce] :
         std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
             {"fp16", "fp16", "fp16", "fp16"},
             {"bf16", "bf16", "bf16", "bf16"},
             {"fp8", "fp8", "fp8", "bf16"}}) {
        const Eval q = train_two_ranks(
            name, {"comm.qcomms.forward=" + forward, "comm.qcomms.backward=" + backward,
                   "comm.allreduce_precision=" + allreduce});
        INFO(name << ": auc " << q.auc << " vs " << f32.auc << ", loss " << q.loss << " vs "
                  << f32.loss);
        CHECK(std::fabs(q.auc - f32.auc) < 0.002);
        CHECK(std::fabs(q.loss - f32.loss) < 0.01 * f32.loss);
        // Not f32 by accident: the quantized run's numbers differ.
        CHECK(q.loss != f32.loss);
    }
}
