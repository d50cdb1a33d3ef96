// libFuzzer target: the plan-file reader (parse_plan, what sharding.plan_file loads). Any text
// must either give a plan or throw shardrec::Error (a message, never a crash, a hang or another
// exception type). A plan it accepts must pass check_plan (the check every other plan gets), print
// (plan_table), and write back (plan_to_yaml) to text that reads as the same plan.
// The model is configs/quickstart.yaml's 8 tables; the world is the one the text names when it
// names a valid one (so that the fuzzer gets past the world check to the shard layouts), else 2
// cpu ranks on one node.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/distributed/sharding_plan.h"

namespace {

std::vector<shardrec::ModelConfig::Table> quickstart_tables() {
    std::vector<shardrec::ModelConfig::Table> tables;
    const int64_t rows[] = {20000, 10000, 5000, 2000, 1000, 4000, 8000, 15000};
    for (int t = 0; t < 8; ++t) {
        shardrec::ModelConfig::Table table;
        table.name = "t" + std::to_string(t);
        table.num_embeddings = rows[t];
        table.embedding_dim = 16;
        table.feature_names = {"f_" + table.name};
        tables.push_back(table);
    }
    return tables;
}

// The world the text names, when it is a valid one of at most 64 ranks.
shardrec::PlacementEnv world_of(const std::string& text) {
    shardrec::PlacementEnv env;
    env.world_size = 2;
    env.local_size = 2;
    try {
        const YAML::Node root = YAML::Load(text);
        const auto w = root["world_size"].as<int>();
        const auto l = root["local_size"].as<int>();
        const auto d = root["compute_device"].as<std::string>();
        if (w >= 1 && w <= 64 && l >= 1 && w % l == 0 && (d == "cpu" || d == "cuda")) {
            env.world_size = w;
            env.local_size = l;
            env.compute_device = d;
        }
    } catch (const YAML::Exception&) {
    }
    return env;
}

[[noreturn]] void fail(const char* what, const std::string& text, const std::string& detail) {
    std::fprintf(stderr, "%s:\n%s\n---\n%s\n", what, text.c_str(), detail.c_str());
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::vector<shardrec::ModelConfig::Table> tables = quickstart_tables();
    const std::string text(reinterpret_cast<const char*>(data), size);
    const shardrec::PlacementEnv env = world_of(text);
    shardrec::ShardingPlan plan;
    try {
        plan = shardrec::parse_plan(text, tables, env, "fuzz_plan.yaml");
    } catch (const shardrec::Error&) {
        return 0;  // rejected with a message: fine
    }
    try {
        shardrec::check_plan(plan, tables);
    } catch (const shardrec::Error& e) {
        fail("an accepted plan fails check_plan", text, e.what());
    }
    (void)shardrec::plan_table(plan, tables);
    const std::string written = shardrec::plan_to_yaml(plan, tables);
    try {
        if (shardrec::parse_plan(written, tables, env, "written.yaml") != plan) {
            fail("the written plan reads back as another plan", text, written);
        }
    } catch (const shardrec::Error& e) {
        fail("the written plan is rejected", written, e.what());
    }
    return 0;
}
