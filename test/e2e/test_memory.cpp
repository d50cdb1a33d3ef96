// End to end: the real binary refuses a model that cannot fit this machine's memory before it
// allocates, under `validate` and `train`, naming the rank, the bytes and the table; and a lowered
// address-space limit (prlimit --as) turns a run that fits into one that is refused.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "test/e2e/e2e_support.h"
#include "test/support/compare.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;

namespace {

std::string quickstart() {
    return (repo_root() / "configs" / "quickstart.yaml").string();
}

}  // namespace

TEST_CASE("memory: a 1e10 x 128 table is refused by validate and by train, fast", "[e2e]") {
    const auto dir = fresh_dir("memory_huge");
    const std::vector<std::string> huge{"--set", "model.tables[0].num_embeddings=10000000000",
                                        "--set", "model.embedding_dim=128",
                                        "--set", "model.bottom_mlp=[64,128]"};
    for (const char* command : {"validate", "train"}) {
        std::vector<std::string> args{command, quickstart()};
        args.insert(args.end(), huge.begin(), huge.end());
        if (std::string(command) == "train") {
            args.insert(args.end(), {"--out", (dir / "run").string()});
        }
        const auto t0 = std::chrono::steady_clock::now();
        const RunResult r = run_shardrec(args);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        INFO(command << ": " << r.output);
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, Contains("rank 0 needs 4.7 TiB but only") &&
                                 Contains("is available to it") && Contains("'t0' 4.7 TiB") &&
                                 Contains("(batch size 256)"));
        CHECK(seconds < 20.0);  // refused before 4.7 TiB are touched, not by the OOM killer
    }
}

TEST_CASE("memory: a table of 10^12 rows is caught by validate", "[e2e]") {
    const RunResult r = run_shardrec(
        {"validate", quickstart(), "--set", "model.tables[0].num_embeddings=1000000000000"});
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("rank 0 needs") && Contains("'t0' 61.8 TiB"));
}

TEST_CASE("memory: under prlimit --as a run that fits without the limit is refused",
          "[e2e][own_memory]") {
    rlimit as{};
    REQUIRE(getrlimit(RLIMIT_AS, &as) == 0);
    if (as.rlim_cur != RLIM_INFINITY) {
        not_run("this test needs an unlimited RLIMIT_AS to start from");
        return;
    }
    const auto dir = fresh_dir("memory_rlimit");
    // t0 at 60M x 16 f32 rows with rowwise_adagrad: 3.8 GiB of tables, which this machine has.
    const std::vector<std::string> big{"--set", "model.tables[0].num_embeddings=60000000",
                                       "--set", "train.steps=2",
                                       "--set", "train.eval_every=0",
                                       "--set", "train.eval_samples=0"};
    const auto with = [&](std::vector<std::string> head) {
        head.insert(head.end(), big.begin(), big.end());
        return head;
    };
    const RunResult fits = run_shardrec(with({"validate", quickstart()}), "timeout -k 10 120");
    INFO(fits.output);
    REQUIRE(fits.exit_code == 0);

    // 3 GiB of address space: less than the tables need, whatever the process maps before the
    // model (its libraries: some 400 MiB, nearly 1 GiB with the CUDA ones), and enough left for
    // the libraries' own buffers (OpenBLAS spins forever when it cannot map its own).
    const std::string prlimit =
        "timeout -k 10 120 prlimit --as=" + std::to_string(int64_t{3} << 30);
    for (const char* command : {"validate", "train"}) {
        std::vector<std::string> args{command, quickstart()};
        if (std::string(command) == "train") {
            args.insert(args.end(), {"--out", (dir / "b").string()});
        }
        const RunResult r = run_shardrec(with(args), prlimit);
        INFO(command << ": " << r.output);
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, Contains("rank 0 needs 3.") && Contains("RLIMIT_AS (ulimit -v)") &&
                                 Contains("'t0' 3.8 GiB"));
    }
}

TEST_CASE("memory: two ranks on one node are refused together, each naming itself", "[e2e]") {
    const auto dir = fresh_dir("memory_mpi");
    // quickstart shards t0 row_wise: 316.6 GiB on each rank, the node's memory counted once.
    const RunResult r =
        run_shardrec({"train", quickstart(), "--set", "model.tables[0].num_embeddings=10000000000",
                      "--out", (dir / "run").string()},
                     "timeout -k 10 120 mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);  // not a hang ended by timeout
    CHECK_THAT(r.output, Contains("rank 0 needs 316.7 GiB") || Contains("rank 1 needs 316.7 GiB"));
    CHECK_THAT(r.output,
               Contains("'t0' 316.6 GiB") && Contains("for the other 1 rank on this node"));
}
