// key_value tables through the real binary: training bitwise like fused at any cache size on one
// and two ranks, checkpoints that cross kernels both ways and world sizes, and the disk's faults (a
// path that cannot hold files, a full disk) stopping every rank with the table, file and rank named
// while the checkpoints already written still load.
#include <sys/mount.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "test/e2e/e2e_support.h"
#include "test/support/compare.h"

using namespace shardrec::test;
namespace fs = std::filesystem;

namespace {

const std::string kMpirun2 = "timeout -k 10 300 mpirun -np 2 --allow-run-as-root --oversubscribe";

std::vector<std::string> key_value(const fs::path& storage,
                                   const std::string& load_factor,
                                   const std::string& algorithm) {
    return {"sharding.compute_kernel=key_value", "sharding.storage.path=" + storage.string(),
            "sharding.cache.load_factor=" + load_factor, "sharding.cache.algorithm=" + algorithm};
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// The loss of every train line and the eval line, as written (bitwise comparisons).
std::vector<std::string> numbers(const fs::path& run) {
    std::vector<std::string> out;
    for (const JsonRecord& r : read_metrics(run)) {
        if (r.at("kind") == "train")
            out.push_back(r.at("step") + " " + r.at("loss"));
        if (r.at("kind") == "eval")
            out.push_back("eval " + r.at("loss") + " " + r.at("auc"));
    }
    return out;
}

std::vector<std::string> train(const fs::path& run,
                               int64_t steps,
                               const std::vector<std::string>& sets,
                               const std::string& prefix,
                               const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> args = small_train_args(run, steps, sets);
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    const RunResult r = run_shardrec(args, prefix);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return numbers(run);
}

}  // namespace

TEST_CASE("key_value e2e: trains bitwise like fused, whatever the cache, on one and two ranks",
          "[e2e][key_value]") {
    const fs::path dir = fresh_dir("kv_exact");
    for (const std::string& prefix : {std::string(), kMpirun2}) {
        const std::string np = prefix.empty() ? "np1" : "np2";
        const auto fused = train(dir / (np + "_fused"), 8, {}, prefix);
        REQUIRE(fused.size() == 9);
        const auto small =
            train(dir / (np + "_kv_small"), 8, key_value(dir / "store", "0.01", "lru"), prefix);
        const auto large =
            train(dir / (np + "_kv_large"), 8, key_value(dir / "store", "0.5", "lfu"), prefix);
        // The prefetch pipeline fills each batch's rows while the batch before trains.
        const auto prefetched = train(
            dir / (np + "_kv_prefetch"), 8,
            plus(key_value(dir / "store", "0.05", "lru"), {"train.pipeline=prefetch_sparse_dist"}),
            prefix);
        CHECK(small == fused);
        CHECK(large == fused);
        CHECK(prefetched == fused);
        // The cache worked at its size: the small one missed more, and overflowed.
        double small_hits = 0, large_hits = 0;
        int64_t overflow = 0;
        for (const auto& [run, hits] : {std::pair{dir / (np + "_kv_small"), &small_hits},
                                        std::pair{dir / (np + "_kv_large"), &large_hits}}) {
            for (const JsonRecord& r : read_metrics(run)) {
                if (r.at("kind") == "cache" && r.at("step") == "8") {
                    *hits += std::stod(r.at("hit_rate"));
                    if (hits == &small_hits)
                        overflow += std::stoll(r.at("overflow"));
                }
            }
        }
        CHECK(small_hits < large_hits);
        CHECK(overflow > 0);
        // The scratch files go with the run.
        CHECK(fs::is_empty(dir / "store"));
    }
}

TEST_CASE("key_value e2e: checkpoints resume across kernels both ways, bitwise",
          "[e2e][key_value][checkpoint]") {
    const fs::path dir = fresh_dir("kv_checkpoint");
    const auto kv = key_value(dir / "store", "0.05", "lru");
    const std::vector<std::string> every3 = {"train.checkpoint_every=3"};
    const auto straight = train(dir / "straight", 6, {}, kMpirun2);
    REQUIRE(straight.size() == 7);
    // key_value for 3 steps, fused for 3 more; and the other way round.
    train(dir / "kv3", 3, plus(kv, every3), kMpirun2);
    std::ifstream manifest(dir / "kv3" / "checkpoints" / "step-00000003" / "manifest.yaml");
    std::stringstream text;
    text << manifest.rdbuf();
    CHECK_THAT(text.str(), Catch::Contains("stored_rows:") && Catch::Contains("row_ids:"));
    const auto kv_then_fused = train(dir / "fused6", 6, {}, kMpirun2,
                                     {"--resume", (dir / "kv3" / "checkpoints").string()});
    train(dir / "fused3", 3, every3, kMpirun2);
    const auto fused_then_kv = train(dir / "kv6", 6, kv, kMpirun2,
                                     {"--resume", (dir / "fused3" / "checkpoints").string()});
    const std::vector<std::string> last3(straight.begin() + 3, straight.end());
    CHECK(kv_then_fused == last3);
    CHECK(fused_then_kv == last3);
    // Resharded: the 2-rank key_value checkpoint (shards of the rows touched) resumed on 1 and 4
    // ranks, as key_value and in memory, trains as the 2-rank fused checkpoint resumed there.
    const std::string kMpirun4 =
        "timeout -k 10 300 mpirun -np 4 --allow-run-as-root --oversubscribe";
    const std::vector<std::string> from_kv = {"--resume", (dir / "kv3" / "checkpoints").string()},
                                   from_fused = {"--resume",
                                                 (dir / "fused3" / "checkpoints").string()};
    for (const auto& [np, prefix, batch] :
         {std::tuple{"np1", std::string(), "64"}, std::tuple{"np4", kMpirun4, "16"}}) {
        INFO(np);
        const std::vector<std::string> b = {std::string("data.batch_size=") + batch};
        const std::string n = np;
        const auto want = train(dir / (n + "_fused_from_fused"), 6, b, prefix, from_fused);
        REQUIRE(want.size() == 4);
        CHECK(train(dir / (n + "_kv_from_kv"), 6, plus(kv, b), prefix, from_kv) == want);
        CHECK(train(dir / (n + "_fused_from_kv"), 6, b, prefix, from_kv) == want);
    }
}

TEST_CASE("key_value e2e: a storage path that cannot hold files stops every rank, named",
          "[e2e][key_value][faults]") {
    const fs::path dir = fresh_dir("kv_bad_path");
    const RunResult r = run_shardrec(
        small_train_args(dir / "run", 2, key_value("/proc/shardrec-kv", "0.1", "lru")), kMpirun2);
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.output, Catch::Contains("sharding.storage.path") &&
                             Catch::Contains("/proc/shardrec-kv") && Catch::Contains("on rank"));
}

TEST_CASE("key_value e2e: a full disk stops every rank, named; the checkpoints still load",
          "[e2e][key_value][faults]") {
    const fs::path dir = fresh_dir("kv_full_disk");
    const fs::path small = dir / "small";
    fs::create_directories(small);
    // A 256 KiB tmpfs is a disk that fills within some steps; mounting one needs root (CI runs
    // as root).
    if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=256k") != 0) {
        not_run("mounting a tmpfs needs root");
        return;
    }
    const RunResult r = run_shardrec(
        small_train_args(dir / "run", 60,
                         plus(key_value(small, "0.05", "lru"), {"train.checkpoint_every=2"})),
        kMpirun2);
    ::umount(small.c_str());
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.output, Catch::Contains("No space left on device") && Catch::Contains("table '") &&
                             Catch::Contains(small.string()) && Catch::Contains("on rank"));
    // The newest checkpoint written before the disk filled loads: resume it with room to spare.
    const RunResult resumed = run_shardrec(
        plus(small_train_args(dir / "resumed", 60, key_value(dir / "roomy", "0.05", "lru")),
             {"--resume", (dir / "run" / "checkpoints").string()}),
        kMpirun2);
    INFO(resumed.output);
    CHECK(resumed.exit_code == 0);
    CHECK_THAT(resumed.output, Catch::Contains("loaded checkpoint"));
}

// A bf16 or f16 cache over f32 rows trains close to the rows in memory (the rounding of each
// update to the cache precision): 150 quickstart steps on two ranks end within 0.005 AUC and 2 %
// of the eval loss, and not bitwise equal.
TEST_CASE("key_value e2e: a reduced-precision cache trains close to f32", "[e2e][key_value]") {
    const fs::path dir = fresh_dir("kv_precision");
    const auto eval_of = [](const fs::path& run) {
        std::pair<double, double> e{0, 0};
        for (const JsonRecord& r : read_metrics(run)) {
            if (r.at("kind") == "eval")
                e = {std::stod(r.at("auc")), std::stod(r.at("loss"))};
        }
        return e;
    };
    const std::vector<std::string> longer = {"train.eval_samples=4096", "train.log_every=50"};
    train(dir / "fused", 150, longer, kMpirun2);
    const auto want = eval_of(dir / "fused");
    for (const std::string precision : {"f16", "bf16"}) {
        train(dir / precision, 150,
              plus(plus(key_value(dir / "store", "0.1", "lru"), longer),
                   {"sharding.cache.precision=" + precision}),
              kMpirun2);
        const auto got = eval_of(dir / precision);
        INFO(precision << ": auc " << got.first << " vs " << want.first << ", loss " << got.second
                       << " vs " << want.second);
        CHECK(std::fabs(got.first - want.first) < 0.002);  // f16 +0.0005, bf16 -0.0013
        CHECK(std::fabs(got.second - want.second) < 0.02 * want.second);
        CHECK(got.second != want.second);
    }
}

// The prefetch pipeline's fill thread wants a CPU beside the compute: a rank confined to as many
// CPUs as it has compute threads is told so (and how to give it one), one with a CPU to spare
// is not.
TEST_CASE("key_value e2e: the prefetch pipeline says when its thread has no CPU of its own",
          "[e2e][key_value]") {
    const fs::path dir = fresh_dir("kv_prefetch_cpus");
    const auto sets = plus(key_value(dir / "store", "0.05", "lru"),
                           {"train.pipeline=prefetch_sparse_dist", "runtime.threads=1"});
    const std::string warning = "the fills take turns with the compute";
    const RunResult one = run_shardrec(small_train_args(dir / "one", 2, sets), "taskset -c 0");
    INFO(one.output);
    REQUIRE(one.exit_code == 0);
    CHECK(one.output.find(warning) != std::string::npos);
    CHECK(one.output.find("mpirun --bind-to none") != std::string::npos);
    const RunResult two = run_shardrec(small_train_args(dir / "two", 2, sets), "taskset -c 0,1");
    INFO(two.output);
    REQUIRE(two.exit_code == 0);
    CHECK(two.output.find(warning) == std::string::npos);
}
