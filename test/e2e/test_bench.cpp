// End to end: `shardrec bench --profile` on two MPI ranks times the step and its regions, and
// writes them to its JSON file; rank 0 alone prints the report. In one process it also gives the
// floor of the step: the dense and the sparse work at their ceilings.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;

namespace {

// The number after "\"key\":" in a one-line JSON object.
double json_number(const std::string& json, const std::string& key) {
    const std::string tag = "\"" + key + "\":";
    const size_t at = json.find(tag);
    if (at == std::string::npos)
        FAIL("no " << key << " in " << json);
    return std::stod(json.substr(at + tag.size()));
}

}  // namespace

TEST_CASE("bench: --profile times the regions of the step on two ranks", "[e2e][mpi]") {
    const auto dir = fresh_dir("bench_profile");
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const auto json_path = dir / "bench.json";
    const RunResult r = run_shardrec({"bench", config, "--steps", "4", "--warmup", "1", "--profile",
                                      "--json", json_path.string()},
                                     "mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("profile           device time per step") != std::string::npos);
    // Rank 0 alone reports, for both ranks.
    const size_t first = r.output.find("step time         median");
    REQUIRE(first != std::string::npos);
    CHECK(r.output.find("step time         median", first + 1) == std::string::npos);
    CHECK(r.output.find("ranks             2: median step") != std::string::npos);
    CHECK(r.output.find("sparse work") == std::string::npos);  // a rank's share is the plan's
    std::ifstream in(json_path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string json = ss.str();
    INFO(json);
    // The result names the build that made it (as --version does) and when.
    const RunResult version = run_shardrec({"--version"});
    const size_t c = version.output.find("(commit ");
    REQUIRE(c != std::string::npos);
    const std::string commit = version.output.substr(c + 8, version.output.find(')', c) - (c + 8));
    CHECK(json.find("\"commit\":\"" + commit + "\",\"date\":\"20") != std::string::npos);
    const double step = json_number(json, "step_ms");
    double top = 0;
    for (const char* region : {"forward", "loss", "backward", "all_reduce", "dense_optimizer"})
        top += json_number(json, region);
    // The regions are inside the step; the sharded lookups and their dists inside sparse_arch.
    // The regions are means over the steps, so they are bounded by the slowest step (the p90 of
    // 4), not by the median.
    // From below only loosely: two ranks preempted between regions on a loaded machine (tests
    // run two at a time on two cores) widen the gaps, once to half the step; regions that timed
    // nothing would fall far below.
    CHECK(top <= json_number(json, "step_ms_p90") * 1.05);
    CHECK(top >= step * 0.25);
    CHECK(json_number(json, "backward/sparse_arch") >=
          json_number(json, "backward/sparse_arch/lookup") +
              json_number(json, "backward/sparse_arch/output_dist"));
    CHECK(json_number(json, "forward/sparse_arch/lookup") > 0);
    CHECK(json_number(json, "forward/sparse_arch/output_dist") > 0);
    CHECK(json_number(json, "backward/over_arch") > 0);
}

TEST_CASE("bench: one process reports the floor of the step", "[e2e]") {
    const auto dir = fresh_dir("bench_floor");
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const auto json_path = dir / "bench.json";
    const RunResult r = run_shardrec(
        {"bench", config, "--steps", "8", "--warmup", "2", "--json", json_path.string()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("sparse work") != std::string::npos);
    CHECK(r.output.find("step floor        >= ") != std::string::npos);
    // quickstart's rows: 16 f32, 64 bytes; the huge-page line says what it read or that it could
    // not.
    CHECK(r.output.find("random rows of 64 B") != std::string::npos);
    CHECK(r.output.find("huge pages: ") != std::string::npos);
    // The build of the elementwise loops that runs, by the CPU's features.
    CHECK(r.output.find(__builtin_cpu_supports("avx512f")
                            ? "cpu loops         AVX-512 (avx512f)"
                            : "cpu loops         baseline x86-64") != std::string::npos);
    std::ifstream in(json_path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string json = ss.str();
    INFO(json);
    // quickstart: 256 samples of 12 ids (8 features, pooling factors 1 to 3) over 16-wide f32
    // rows: at least each id's row, read once.
    CHECK(json_number(json, "sparse_bytes_per_step") > 256.0 * 12 * 16 * 4);
    const double floor = json_number(json, "dense_floor_ms") + json_number(json, "sparse_floor_ms");
    CHECK(json_number(json, "sparse_floor_ms") > 0);
    CHECK(json_number(json, "random_row_gbps") > 0);
    CHECK(json_number(json, "random_row_bytes") == 64);
    CHECK(floor < json_number(json, "step_ms"));
}

// key_value tables in one process (no mpirun): the collection is sharded over a group of one,
// and the cache line sums the ranks there are.
TEST_CASE("bench: one process with key_value tables reports its cache", "[e2e]") {
    const auto dir = fresh_dir("bench_key_value");
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    const auto json_path = dir / "bench.json";
    const RunResult r = run_shardrec(
        {"bench", config, "--steps", "4", "--warmup", "2", "--json", json_path.string(), "--set",
         "sharding.compute_kernel=key_value", "--set", "sharding.cache.load_factor=0.1", "--set",
         "sharding.storage.path=" + (dir / "storage").string()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("cache             hit rate ") != std::string::npos);
    std::ifstream in(json_path);
    std::stringstream ss;
    ss << in.rdbuf();
    CHECK(json_number(ss.str(), "cache_misses_per_step") > 0);
}

// Managed-collision tables: each timed step remaps its batch's raw ids as training does (the
// batches are made of raw ids), on one process and on two ranks with the buckets split.
TEST_CASE("bench: managed-collision tables remap every step", "[e2e][mpi]") {
    const auto config = (repo_root() / "configs" / "quickstart.yaml").string();
    for (const int np : {1, 2}) {
        INFO(np << " rank(s)");
        const RunResult r = run_shardrec(
            {"bench", config, "--steps", "6", "--warmup", "2", "--set",
             "data.synthetic.raw_id_drift=4", "--set",
             "model.tables[0].managed_collision.zch_size=20000", "--set",
             "model.tables[0].managed_collision.eviction_interval=2", "--set",
             "model.tables[0].managed_collision.total_num_buckets=2"},
            np == 1 ? std::string() : "mpirun -np 2 --allow-run-as-root --oversubscribe");
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        CHECK(r.output.find("step time         median") != std::string::npos);
    }
}
