// runtime.gemm_math on the CPU: the quickstart on two ranks (mpirun, the real binary) for 200
// steps with bf16 GEMMs (oneDNN, f32 accumulation and f32 master weights) stays close to f32
// GEMMs, eval AUC within 0.002 and loss within 1 % (the 1000-step runs of
// bench/results/cpu-20261126-gemm are within 0.001 AUC), and repeats bitwise from run to run.
// tf32, a CUDA tensor-core math, is refused on the CPU with the key named.
#include <catch2/catch.hpp>
#include <cmath>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;

namespace {

struct Eval {
    double auc = 0, loss = 0;
    std::string train_losses;  // every logged training loss, in order
};

Eval train_two_ranks(const std::string& name, const std::string& math) {
    const auto run = fresh_dir("gemm_math_" + name);
    const auto config = std::filesystem::absolute(repo_root() / "configs" / "quickstart.yaml");
    const RunResult r = run_shardrec(
        {"train", config.string(), "--out", run.string(), "--set", "train.steps=200", "--set",
         "train.eval_every=0", "--set", "train.log_every=20", "--set", "runtime.gemm_math=" + math},
        "mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Eval e;
    for (const auto& rec : read_metrics(run)) {
        if (rec.count("kind") && rec.at("kind") == "eval") {
            e.auc = std::stod(rec.at("auc"));
            e.loss = std::stod(rec.at("loss"));
        } else if (rec.count("kind") && rec.at("kind") == "train") {
            e.train_losses += rec.at("loss") + " ";
        }
    }
    REQUIRE(e.auc > 0.7);  // it trained
    return e;
}

}  // namespace

TEST_CASE("gemm_math bf16 on the CPU trains the quickstart as f32 does, and repeats",
          "[e2e][mpi]") {
    const Eval f32 = train_two_ranks("f32", "f32");
    const Eval bf16 = train_two_ranks("bf16", "bf16");
    INFO("auc " << bf16.auc << " vs " << f32.auc << ", loss " << bf16.loss << " vs " << f32.loss);
    CHECK(std::fabs(bf16.auc - f32.auc) < 0.002);
    CHECK(std::fabs(bf16.loss - f32.loss) < 0.01 * f32.loss);
    CHECK(bf16.train_losses != f32.train_losses);  // the bf16 GEMMs ran
    const Eval again = train_two_ranks("bf16_again", "bf16");
    CHECK(again.train_losses == bf16.train_losses);
    CHECK(again.auc == bf16.auc);
}

TEST_CASE("gemm_math tf32 on the CPU is refused, naming the key", "[e2e]") {
    const auto config = std::filesystem::absolute(repo_root() / "configs" / "quickstart.yaml");
    const RunResult r =
        run_shardrec({"validate", config.string(), "--set", "runtime.gemm_math=tf32"});
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("runtime.gemm_math") != std::string::npos);
    CHECK(r.output.find("tf32 is a CUDA tensor-core math") != std::string::npos);
}
