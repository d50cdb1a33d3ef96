// Managed-collision tables end to end with the real binary: raw ids from a drifting vocabulary
// (data.synthetic.raw_id_drift) go through the table's remap, slots are evicted and reset, the
// remap state is checkpointed: N steps, --resume, N more equals 2N straight, evictions after the
// resume included. Sharded managed-collision tables are refused by name.
#include <catch2/catch.hpp>

#include "engine/train/checkpoint.h"
#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// The quickstart model with table t4 (1000 rows, 3 ids a bag) managed: 100 zch slots, 900
// residual rows, an eviction pass every 2 steps, a new raw id every 4 samples.
std::vector<std::string> mc_args(const fs::path& run, int steps) {
    return {"train", (repo_root() / "configs" / "quickstart.yaml").string(),
            "--out", run.string(),
            "--set", "train.steps=" + std::to_string(steps),
            "--set", "train.log_every=1",
            "--set", "train.eval_every=4",
            "--set", "train.eval_samples=256",
            "--set", "data.batch_size=16",
            "--set", "train.checkpoint_every=4",
            "--set", "data.synthetic.raw_id_drift=4",
            "--set", "model.tables[4].managed_collision.zch_size=100",
            "--set", "model.tables[4].managed_collision.mch_size=900",
            "--set", "model.tables[4].managed_collision.eviction_interval=2"};
}

// metrics.jsonl lines from step `from` on, without timings.
std::vector<std::string> numbers(const fs::path& run, int from) {
    std::vector<std::string> out;
    for (const auto& r : read_metrics(run)) {
        const auto step = r.find("step");
        if (step == r.end() || std::stoi(step->second) < from)
            continue;
        std::string line = r.at("kind") + " " + step->second;
        for (const char* key :
             {"loss", "lr", "auc", "ne", "occupancy", "slots", "evictions", "admissions"}) {
            if (r.count(key))
                line += std::string(" ") + key + "=" + r.at(key);
        }
        out.push_back(line);
    }
    return out;
}

std::map<std::string, uint32_t> crcs(const fs::path& ckpt) {
    std::map<std::string, uint32_t> out;
    for (const auto& f : shardrec::train::read_manifest(ckpt.string()).files)
        out[f.path] = f.crc32;
    return out;
}

}  // namespace

TEST_CASE("managed collision e2e: a table trains on raw ids, evicts, and resumes exactly",
          "[e2e][mc]") {
    const auto dir = fresh_dir("mc_resume");
    const RunResult straight = run_shardrec(mc_args(dir / "straight", 8));
    INFO(straight.output);
    REQUIRE(straight.exit_code == 0);
    int64_t evictions_after_4 = 0, records = 0;
    for (const auto& r : read_metrics(dir / "straight")) {
        if (r.at("kind") != "managed_collision")
            continue;
        ++records;
        CHECK(r.at("table") == "t4");
        CHECK(std::stoi(r.at("step")) % 2 == 0);
        CHECK(r.at("slots") == "100");
        if (std::stoi(r.at("step")) > 4)
            evictions_after_4 += std::stoll(r.at("evictions"));
    }
    CHECK(records == 4);  // steps 2, 4, 6, 8
    CHECK(evictions_after_4 > 0);
    const fs::path state = dir / "straight" / "checkpoints" / "step-00000004" /
                           shardrec::train::managed_collision_file("t4");
    CHECK(fs::file_size(state) > 0);

    const RunResult first = run_shardrec(mc_args(dir / "first", 4));
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    auto args = mc_args(dir / "resumed", 8);
    args.insert(args.end(), {"--resume", (dir / "first" / "checkpoints").string()});
    const RunResult resumed = run_shardrec(args);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    const auto want = numbers(dir / "straight", 5);
    REQUIRE(want.size() == 7);  // train 5..8, managed_collision 6 and 8, eval 8
    CHECK(numbers(dir / "resumed", 0) == want);
    CHECK(crcs(dir / "resumed" / "checkpoints" / "step-00000008") ==
          crcs(dir / "straight" / "checkpoints" / "step-00000008"));
}

TEST_CASE("managed collision e2e: a checkpoint without its remap state is refused, naming the file",
          "[e2e][mc]") {
    const auto dir = fresh_dir("mc_state");
    const RunResult mc = run_shardrec(mc_args(dir / "mc", 4));
    INFO(mc.output);
    REQUIRE(mc.exit_code == 0);
    const fs::path ckpt = dir / "mc" / "checkpoints" / "step-00000004";
    auto args = mc_args(dir / "resumed", 8);
    args.insert(args.end(), {"--resume", ckpt.string()});
    // The manifest lists the file with its CRC: the file check names what is missing.
    fs::rename(ckpt / shardrec::train::managed_collision_file("t4"), ckpt / "mc_moved.bin");
    const RunResult resumed = run_shardrec(args);
    CHECK(resumed.exit_code != 0);
    CHECK_THAT(resumed.output, Contains("managed_collision/t4.bin"));
}

TEST_CASE("managed collision e2e: two ranks refuse a managed-collision table by name",
          "[e2e][mc]") {
    const auto dir = fresh_dir("mc_np2");
    const RunResult r =
        run_shardrec(mc_args(dir / "run", 2),
                     "timeout -k 10 300 mpirun -np 2 --allow-run-as-root --oversubscribe");
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.output, Contains("table 't4': model.tables[].managed_collision is not supported "
                                  "for sharded tables yet (2 ranks)"));
}
