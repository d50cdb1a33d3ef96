// `shardrec plan` end to end: the binary plans the MLPerf config far beyond this machine, writes a
// plan file that reads back, and fails clearly when the tables cannot fit.
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/distributed/sharding_plan.h"

using Catch::Matchers::Contains;

namespace {

namespace fs = std::filesystem;

fs::path repo_root() {
    // This file is test/distributed/test_plan_command.cpp.
    return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

// SHARDREC_BIN (set by ctest), else the shardrec next to this build's test folder.
std::string shardrec_bin() {
    if (const char* bin = std::getenv("SHARDREC_BIN")) {
        return bin;
    }
    return (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "shardrec").string();
}

struct Run {
    int rc = -1;
    std::string output;
};

Run run_plan(const std::vector<std::string>& args) {
    const std::string bin = shardrec_bin();
    REQUIRE(fs::exists(bin));
    std::string cmd = "'" + bin + "' plan";
    for (const std::string& a : args) {
        cmd += " '" + a + "'";
    }
    Run r;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    REQUIRE(p != nullptr);
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) {
        r.output.append(buf.data(), n);
    }
    const int status = pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

}  // namespace

TEST_CASE("shardrec plan: the MLPerf config on 64 H100s, written and read back", "[cli]") {
    const std::string config = (repo_root() / "configs" / "dlrm_dcnv2_mlperf.yaml").string();
    const fs::path out = fs::temp_directory_path() / "shardrec_test_plan_command.yaml";
    const Run r = run_plan({config, "--world-size", "64", "--out", out.string()});
    INFO(r.output);
    CHECK(r.rc == 0);
    CHECK_THAT(r.output, Contains("param   | sharding type  | compute kernel |"));
    CHECK_THAT(r.output, Contains("topology: 64 ranks (8 nodes of 8), cuda"));
    CHECK_THAT(r.output, Contains("predicted step:"));
    const shardrec::Config c = shardrec::load_config(config, {});
    shardrec::PlacementEnv env;
    env.world_size = 64;
    env.local_size = 8;
    env.compute_device = "cuda";
    CHECK_NOTHROW(shardrec::load_plan(out.string(), c.model.tables, env));
    fs::remove(out);
}

TEST_CASE("shardrec plan: one rank cannot hold the MLPerf tables; usage errors", "[cli]") {
    const std::string config = (repo_root() / "configs" / "dlrm_dcnv2_mlperf.yaml").string();
    const Run one = run_plan({config, "--world-size", "1"});
    CHECK(one.rc == 1);
    CHECK_THAT(one.output, Contains("the model does not fit"));
    CHECK_THAT(one.output, Contains("of HBM"));
    const Run usage = run_plan({config});
    CHECK(usage.rc == 2);
    CHECK_THAT(usage.output, Contains("plan needs --world-size N"));
    CHECK(run_plan({config, "--world-size", "0"}).rc == 2);
}

// key_value tables: each table's cache and disk, the predicted hit rate on the synthetic data's
// Zipf law, and a run's measured one beside it (--measured reads its metrics.jsonl).
TEST_CASE("shardrec plan: key_value tables' cache, disk and hit rates", "[cli]") {
    const fs::path run = fs::temp_directory_path() / "shardrec_plan_measured";
    fs::create_directories(run);
    {
        std::FILE* f = std::fopen((run / "metrics.jsonl").c_str(), "w");
        REQUIRE(f != nullptr);
        std::fputs(
            "{\"kind\":\"cache\",\"step\":50,\"table\":\"big0\",\"hit_rate\":0.25,"
            "\"unique_rows\":10,\"misses\":7}\n"
            "{\"kind\":\"cache\",\"step\":100,\"table\":\"big0\",\"hit_rate\":0.6125,"
            "\"unique_rows\":10,\"misses\":4}\n",
            f);
        std::fclose(f);
    }
    const Run r =
        run_plan({(repo_root() / "configs" / "dlrm_key_value.yaml").string(), "--world-size", "2",
                  "--planner", "config", "--measured", run.string()});
    INFO(r.output);
    CHECK(r.rc == 0);
    // 5 % of 4 M rows of dim 64 f32 with a row-wise Adagrad accumulator: 200000 slots of 260 B;
    // on disk 4 M records of 272 B (the row, a CRC-32 and a magic word, 8-byte aligned).
    CHECK_THAT(r.output,
               Contains("      big0 |     4000000 |      200000 |      49.6 |     1.01 "));
    CHECK_THAT(r.output, Contains("|   0.6125"));  // the last window's
    CHECK_THAT(r.output, Contains("    small3 |      100000 |        5000 |"));
    // The misses' disk time beside the step, and each rank's tiers against their budgets.
    CHECK_THAT(r.output, Contains("| cache misses "));
    CHECK_THAT(r.output, Contains("storage per rank: DDR (budget 9.00 GiB), disk (budget -: "
                                  "disk_gib not given, not checked)"));
    CHECK_THAT(r.output, Contains("       0 |    144.6 MiB |     2.08 GiB"));
    fs::remove_all(run);
}

// 2D parallelism: the plan is one sharding group's (W / R ranks), said so, replicated.
TEST_CASE("shardrec plan: sharding.replica_groups plans one sharding group", "[cli]") {
    const Run r =
        run_plan({(repo_root() / "configs" / "quickstart.yaml").string(), "--world-size", "4",
                  "--planner", "config", "--set", "sharding.replica_groups=2", "--set",
                  "sharding.topology=" +
                      (repo_root() / "configs" / "topologies" / "cpu_2rank.yaml").string()});
    INFO(r.output);
    CHECK(r.rc == 0);
    CHECK_THAT(r.output, Contains("the plan of one sharding group of 2 ranks, replicated 2 times"));
    CHECK_THAT(r.output, Contains("topology: 2 ranks (1 node of 2)"));
}

// Managed-collision tables: where each bucket's remap state lives, and its slot maps' size.
TEST_CASE("shardrec plan: managed-collision buckets on the ranks holding their rows", "[cli]") {
    const std::string config = (repo_root() / "configs" / "quickstart.yaml").string();
    const Run r = run_plan({config, "--world-size", "2", "--planner", "config", "--set",
                            "model.tables[4].managed_collision.zch_size=1000", "--set",
                            "model.tables[4].managed_collision.total_num_buckets=4", "--set",
                            "sharding.tables[2].sharding_type=row_wise"});
    INFO(r.output);
    CHECK(r.rc == 0);
    CHECK_THAT(r.output, Contains("managed-collision tables"));
    CHECK_THAT(r.output, Contains("        t4 |       4 |         250 |"));
    CHECK_THAT(r.output, Contains("| 0: 2 buckets (0-1), 1: 2 buckets (2-3)"));
    const Run plain = run_plan({config, "--world-size", "2", "--planner", "config"});
    CHECK(plain.output.find("managed-collision tables") == std::string::npos);
}
