// End to end: `shardrec bench --profile` on two MPI ranks times the step and its regions, and
// writes them to its JSON file; rank 0 alone prints the report.
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
    std::ifstream in(json_path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string json = ss.str();
    INFO(json);
    const double step = json_number(json, "step_ms");
    double top = 0;
    for (const char* region : {"forward", "loss", "backward", "all_reduce", "dense_optimizer"})
        top += json_number(json, region);
    // The regions are inside the step; the sharded lookups and their dists inside sparse_arch.
    CHECK(top <= step * 1.05);
    CHECK(top >= step * 0.5);
    CHECK(json_number(json, "backward/sparse_arch") >=
          json_number(json, "backward/sparse_arch/lookup") +
              json_number(json, "backward/sparse_arch/output_dist"));
    CHECK(json_number(json, "forward/sparse_arch/lookup") > 0);
    CHECK(json_number(json, "forward/sparse_arch/output_dist") > 0);
    CHECK(json_number(json, "backward/over_arch") > 0);
}
