// End to end: a file argument that is missing, a directory or a device is refused by the real
// binary with what the file is for and the path (the config file, `--set sharding.plan_file`,
// also in one process, `plan --topology`), never with a stream's "basic_filebuf::underflow ...
// Is a directory".
#include <catch2/catch.hpp>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;

namespace {

bool has(const RunResult& r, const std::string& text) {
    return r.output.find(text) != std::string::npos;
}

// `shardrec plan` of the quickstart config for 2 ranks with the plan a run would use.
RunResult plan_with(const std::string& plan_file) {
    return run_shardrec({"plan", (repo_root() / "configs" / "quickstart.yaml").string(),
                         "--world-size", "2", "--planner", "config", "--set",
                         "sharding.plan_file=" + plan_file, "--set", "sharding.tables=[]"});
}

}  // namespace

TEST_CASE("input files: a directory, a device or a missing file is named as such", "[e2e]") {
    const auto dir = fresh_dir("input_files");
    const std::string d = dir.string();
    RunResult r;

    SECTION("the config file argument") {
        for (const char* command : {"train", "validate"}) {
            r = run_shardrec({command, d});
            INFO(r.output);
            CHECK(r.exit_code == 1);
            CHECK(has(r, "the config file '" + d + "' is a directory, expected a file"));
            CHECK(!has(r, "underflow"));
        }
        r = run_shardrec({"validate", "/dev/null"});
        CHECK(has(r, "the config file '/dev/null' is a device, expected a file"));
        r = run_shardrec({"validate", d + "/nope.yaml"});
        CHECK(has(r, "the config file '" + d + "/nope.yaml' does not exist"));
    }
    SECTION("sharding.plan_file given with --set") {
        r = plan_with((repo_root() / "configs" / "plans" / "quickstart_2rank_cpu.yaml").string());
        INFO(r.output);
        REQUIRE(r.exit_code == 0);  // the same command with a real plan works
        r = plan_with(d);
        INFO(r.output);
        CHECK(r.exit_code == 1);
        CHECK(has(
            r, "the plan file (sharding.plan_file) '" + d + "' is a directory, expected a file"));
        r = plan_with(d + "/plan.yaml");
        CHECK(r.exit_code == 1);
        CHECK(has(r, "the plan file (sharding.plan_file) '" + d + "/plan.yaml' does not exist"));
    }
    SECTION("sharding.plan_file in one process: checked, and its plan used") {
        const std::string quickstart = (repo_root() / "configs" / "quickstart.yaml").string();
        const auto train_with = [&](const std::string& name, const std::string& plan_file) {
            std::vector<std::string> sets{"sharding.tables=[]"};
            if (!plan_file.empty())
                sets.push_back("sharding.plan_file=" + plan_file);
            return run_shardrec(small_train_args(dir / name, 20, sets));
        };
        r = train_with("missing", d + "/plan.yaml");
        INFO(r.output);
        CHECK(r.exit_code == 1);
        CHECK(has(r, "the plan file (sharding.plan_file) '" + d + "/plan.yaml' does not exist"));
        r = run_shardrec({"validate", quickstart, "--set", "sharding.tables=[]", "--set",
                          "sharding.plan_file=" + d});
        CHECK(r.exit_code == 1);
        CHECK(has(
            r, "the plan file (sharding.plan_file) '" + d + "' is a directory, expected a file"));
        r = train_with("other_world",
                       (repo_root() / "configs" / "plans" / "quickstart_2rank_cpu.yaml").string());
        CHECK(r.exit_code == 1);
        CHECK(has(r, "world_size: the plan is for 2 ranks, this run has 1"));
        r = run_shardrec({"plan", quickstart, "--world-size", "1", "--out", d + "/plan1.yaml"});
        REQUIRE(r.exit_code == 0);
        r = train_with("planned", d + "/plan1.yaml");
        REQUIRE(r.exit_code == 0);
        REQUIRE(train_with("unplanned", "").exit_code == 0);
        const auto planned = read_metrics(dir / "planned"), plain = read_metrics(dir / "unplanned");
        REQUIRE(planned.size() == plain.size());
        for (size_t i = 0; i < plain.size(); ++i) {
            if (plain[i].count("loss") != 0)
                CHECK(planned[i].at("loss") == plain[i].at("loss"));
            if (plain[i].count("auc") != 0)
                CHECK(planned[i].at("auc") == plain[i].at("auc"));
        }
    }
    SECTION("plan --topology") {
        r = run_shardrec({"plan", (repo_root() / "configs" / "quickstart.yaml").string(),
                          "--world-size", "2", "--topology", d});
        INFO(r.output);
        CHECK(r.exit_code == 1);
        CHECK(has(r, "the topology file '" + d + "' is a directory, expected a file"));
    }
}
