// ShardingPlan: the manual plan from a config's sharding section, its errors (with file:line and
// did-you-mean), plan files (round trip and strict reading), check_plan and TorchRec's plan print.
#include <catch2/catch.hpp>
#include <functional>

#include "engine/config/config.h"
#include "engine/core/error.h"
#include "engine/distributed/sharding_plan.h"
#include "test/support/compare.h"

using shardrec::test::error_of;

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

// 11 lines: a sharding section appended starts on line 12.
const char* const kModel = R"(train: {steps: 1}
data: {batch_size: 4}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [8]
  top_mlp: [1]
  tables:
    - {name: user_table, num_embeddings: 10}
    - {name: product_table, num_embeddings: 7}
    - {name: ads, num_embeddings: 5}
)";

Config config_with(const std::string& sharding) {
    return parse_config(std::string(kModel) + sharding, {}, "t.yaml");
}

std::string config_errors(const std::string& sharding) {
    try {
        config_with(sharding);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

PlacementEnv env_of(int world, int local, const std::string& device = "cpu") {
    PlacementEnv env;
    env.world_size = world;
    env.local_size = local;
    env.compute_device = device;
    return env;
}

}  // namespace

TEST_CASE("manual_plan: tables without an entry are table_wise, round-robin", "[distributed]") {
    const Config c = config_with("");
    const ShardingPlan plan = manual_plan(c.model, c.sharding, env_of(2, 2));
    CHECK(plan.at("user_table").ranks == std::vector<int>{0});
    CHECK(plan.at("product_table").ranks == std::vector<int>{1});
    CHECK(plan.at("ads").ranks == std::vector<int>{0});
    CHECK(plan.at("ads").sharding_type == ShardingType::kTableWise);
    CHECK(plan.at("ads").compute_kernel == EmbeddingComputeKernel::kFused);
    CHECK_NOTHROW(check_plan(plan, c.model.tables));
    CHECK_THAT(error_of([&] { plan.at("add"); }), Contains("did you mean 'ads'"));
}

TEST_CASE("manual_plan: the section default and per-table entries", "[distributed]") {
    const Config c = config_with(R"(sharding:
  sharding_type: row_wise
  tables:
    - {name: product_table, sharding_type: cw, ranks: [3, 1], column_widths: [2, 6]}
    - {name: ads, sharding_type: data_parallel}
)");
    REQUIRE(c.sharding.tables.size() == 2);
    CHECK(c.sharding.tables[0].sharding_type == "column_wise");  // canonical name
    CHECK(c.sharding.tables[1].compute_kernel == "dense");       // data_parallel's kernel
    const ShardingPlan plan = manual_plan(c.model, c.sharding, env_of(4, 2));
    const ParameterSharding& user = plan.at("user_table");
    CHECK(user.sharding_type == ShardingType::kRowWise);
    CHECK(user.ranks == std::vector<int>{0, 1, 2, 3});
    CHECK(user.sharding_spec[3].shard_sizes == std::array<int64_t, 2>{1, 8});
    const ParameterSharding& product = plan.at("product_table");
    CHECK(product.ranks == std::vector<int>{3, 1});
    CHECK(product.sharding_spec[1].shard_offsets == std::array<int64_t, 2>{0, 2});
    CHECK(product.sharding_spec[1].shard_sizes == std::array<int64_t, 2>{7, 6});
    CHECK(plan.at("ads").sharding_type == ShardingType::kDataParallel);
    CHECK(plan.at("ads").compute_kernel == EmbeddingComputeKernel::kDense);
}

TEST_CASE("manual_plan: table_row_wise by its node's first rank, or round-robin over nodes",
          "[distributed]") {
    const Config c = config_with(R"(sharding:
  sharding_type: table_row_wise
  tables:
    - {name: product_table, ranks: [2]}
)");
    const ShardingPlan plan = manual_plan(c.model, c.sharding, env_of(4, 2));
    CHECK(plan.at("user_table").ranks == std::vector<int>{0, 1});
    CHECK(plan.at("product_table").ranks == std::vector<int>{2, 3});
    CHECK(plan.at("ads").ranks == std::vector<int>{2, 3});  // the second default table: node 1
    CHECK(plan.at("product_table").sharding_spec[0].shard_sizes == std::array<int64_t, 2>{4, 8});
}

TEST_CASE("Sharding config: unknown tables and types are errors with line and did-you-mean",
          "[distributed]") {
    const std::string unknown = config_errors(R"(sharding:
  tables:
    - {name: userr_table, sharding_type: row_wise}
    - {name: ads, sharding_type: row_wse}
    - {name: ads, compute_kernel: fused}
)");
    CHECK_THAT(unknown, Contains("t.yaml:14:"));
    CHECK_THAT(unknown, Contains("sharding.tables[0].name: unknown table 'userr_table' (did you "
                                 "mean 'user_table'?)"));
    CHECK_THAT(unknown, Contains("t.yaml:15:"));
    CHECK_THAT(unknown, Contains("sharding.tables[1].sharding_type: unknown sharding type "
                                 "'row_wse'"));
    CHECK_THAT(unknown, Contains("did you mean 'row_wise'?"));
    CHECK_THAT(unknown, Contains("sharding.tables[2].name: table 'ads' already has an entry"));

    const std::string shapes = config_errors(R"(sharding:
  tables:
    - {name: ads, sharding_type: column_wise, column_widths: [4, 5]}
    - {name: user_table, sharding_type: data_parallel, compute_kernel: fused}
    - {name: product_table, sharding_type: row_wise, column_widths: [8]}
)");
    CHECK_THAT(shapes,
               Contains("sharding.tables[0].column_widths: add up to 9, table 'ads' has 8"));
    CHECK_THAT(shapes, Contains("sharding.tables[1].compute_kernel: data_parallel tables use the "
                                "dense kernel"));
    CHECK_THAT(shapes, Contains("sharding.tables[2].column_widths: only valid when sharding_type "
                                "is column_wise"));
    CHECK_THAT(config_errors("sharding:\n  planner: auto\n  tables: [{name: ads, ranks: [1]}]\n"),
               Contains("t.yaml:14:31: sharding.tables[0].ranks: give the sharding_type"));
    CHECK_THAT(config_errors("sharding: {sharding_type: rows}\n"),
               Contains("sharding.sharding_type: expected one of data_parallel"));
    CHECK_THAT(config_errors("sharding: {plan_file: p.yaml, planner: auto}\n"),
               Contains("sharding.plan_file: a plan file replaces the auto planner: set "
                        "planner: manual"));
    // An entry's load_factor 0 is refused, not taken for the section's (its absence is).
    CHECK_THAT(config_errors("sharding:\n  tables: [{name: ads, cache: {load_factor: 0}}]\n"),
               Contains("sharding.tables[0].cache.load_factor: must be > 0, <= 1, got '0'"));
}

TEST_CASE("Sharding config: the dense kernel is refused on every type but data_parallel",
          "[distributed]") {
    // An entry: names the table, its type and what is allowed.
    const std::string entry = config_errors(R"(sharding:
  tables:
    - {name: ads, sharding_type: row_wise, compute_kernel: dense}
)");
    CHECK_THAT(entry, Contains("t.yaml:14:"));
    CHECK_THAT(entry, Contains("sharding.tables[0].compute_kernel: table 'ads' is row_wise: the "
                               "dense compute kernel (gradient materialised and applied by the "
                               "dense optimizer) is only for data_parallel tables; use fused, or "
                               "sharding_type: data_parallel"));
    // The section default, for the table_wise tables without an entry.
    CHECK_THAT(config_errors("sharding: {compute_kernel: dense}\n"),
               Contains("sharding.compute_kernel: dense (gradient materialised and applied by the "
                        "dense optimizer) is only for data_parallel tables, and the tables it "
                        "applies to are table_wise"));
    // Allowed where everything it reaches is data_parallel; an entry of another type that
    // would inherit it is refused by name.
    const Config dp =
        config_with("sharding: {sharding_type: data_parallel, compute_kernel: dense}\n");
    CHECK(manual_plan(dp.model, dp.sharding, env_of(2, 2)).at("ads").compute_kernel ==
          EmbeddingComputeKernel::kDense);
    CHECK_THAT(config_errors(R"(sharding:
  sharding_type: data_parallel
  compute_kernel: dense
  tables: [{name: ads, sharding_type: table_wise}]
)"),
               Contains("sharding.tables[0].compute_kernel: table 'ads' is table_wise: the dense "
                        "compute kernel"));
    // With the auto planner it narrows the table to data_parallel (planner tests), but not a
    // type given beside it.
    CHECK_THAT(config_errors(R"(sharding:
  planner: auto
  tables: [{name: ads, sharding_type: column_wise, compute_kernel: dense}]
)"),
               Contains("table 'ads' is column_wise: the dense compute kernel"));
    CHECK(config_errors("sharding: {planner: auto, compute_kernel: dense}\n").empty());
}

TEST_CASE("manual_plan: entries that do not fit the world name their line", "[distributed]") {
    const Config c = config_with(R"(sharding:
  tables:
    - {name: ads, ranks: [5]}
    - {name: user_table, sharding_type: table_row_wise, ranks: [1]}
)");
    const std::string message = error_of([&] { manual_plan(c.model, c.sharding, env_of(4, 2)); });
    CHECK_THAT(message, Contains("does not fit 4 ranks (2 per node)"));
    CHECK_THAT(message, Contains("t.yaml:14:7: sharding.tables[0] ('ads'): rank 5 is out of range "
                                 "for world size 4"));
    CHECK_THAT(message, Contains("t.yaml:15:7: sharding.tables[1] ('user_table'): table_row_wise "
                                 "spans the 2 ranks of one node"));
    CHECK_NOTHROW(manual_plan(c.model, c.sharding, env_of(6, 1)));
}

TEST_CASE("Plan file: write and read back the same plan", "[distributed]") {
    const Config c = config_with(R"(sharding:
  sharding_type: row_wise
  tables:
    - {name: product_table, sharding_type: column_wise, ranks: [2, 0, 2], column_widths: [2, 5, 1]}
    - {name: ads, sharding_type: data_parallel}
)");
    const PlacementEnv env = env_of(4, 2, "cuda");
    const ShardingPlan plan = manual_plan(c.model, c.sharding, env);
    const std::string text = plan_to_yaml(plan, c.model.tables);
    CHECK_THAT(text, Contains("placement: rank:3/cuda:1"));
    const ShardingPlan back = parse_plan(text, c.model.tables, env, "plan.yaml");
    CHECK(back == plan);
    CHECK(plan_to_yaml(back, c.model.tables) == text);
}

TEST_CASE("Plan file: another world, unknown or missing tables and bad shards are errors",
          "[distributed]") {
    const Config c = config_with("");
    const ShardingPlan plan = manual_plan(c.model, c.sharding, env_of(2, 2));
    const std::string text = plan_to_yaml(plan, c.model.tables);
    const auto errors = [&](const std::string& from, const std::string& to, int world) {
        std::string edited = text;
        if (!from.empty()) {
            const size_t at = edited.find(from);
            REQUIRE(at != std::string::npos);
            edited.replace(at, from.size(), to);
        }
        return error_of(
            [&] { parse_plan(edited, c.model.tables, env_of(world, world), "p.yaml"); });
    };
    CHECK_THAT(errors("", "", 4), Contains("p.yaml:2:13: world_size: the plan is for 2 ranks, "
                                           "this run has 4"));
    const std::string renamed = errors("name: ads", "name: adds", 2);
    CHECK_THAT(renamed, Contains("unknown table 'adds' (did you mean 'ads'?)"));
    CHECK_THAT(renamed, Contains("tables: model table 'ads' has no entry"));
    const std::string moved = errors("shard_offsets: [0, 0], shard_sizes: [7, 8]",
                                     "shard_offsets: [1, 0], shard_sizes: [7, 8]", 2);
    CHECK_THAT(moved, Contains("tables[1].shards: table_wise of table 'product_table' [7, 8]: "
                               "shard 0: got offsets [1, 0]"));
    CHECK_THAT(errors("rank:1/cpu", "rank:1", 2), Contains("placement rank:R/device"));
    CHECK_THAT(errors("compute_kernel: fused", "compute_kernel: fussed", 2),
               Contains("did you mean 'fused'?"));
}

TEST_CASE("check_plan: every model table planned, no others, layouts exact", "[distributed]") {
    const Config c = config_with("");
    ShardingPlan plan = manual_plan(c.model, c.sharding, env_of(2, 2));
    ShardingPlan missing = plan;
    missing.tables.erase("ads");
    CHECK_THAT(error_of([&] { check_plan(missing, c.model.tables); }),
               Contains("table 'ads' has no sharding"));
    ShardingPlan extra = plan;
    extra.tables["user_tabel"] = plan.tables["user_table"];
    CHECK_THAT(error_of([&] { check_plan(extra, c.model.tables); }),
               Contains("table 'user_tabel' is not in the model (did you mean 'user_table'?)"));
    plan.tables["ads"].sharding_spec[0].shard_sizes[0] = 4;
    CHECK_THAT(error_of([&] { check_plan(plan, c.model.tables); }),
               Contains("table 'ads': shard 0: got offsets [0, 0] sizes [4, 8]"));
}

TEST_CASE("plan_table: TorchRec's print of two 4096 x 64 tables on one GPU", "[distributed]") {
    const Config c = parse_config(R"(train: {steps: 1}
data: {batch_size: 4}
model:
  type: dlrm
  embedding_dim: 64
  bottom_mlp: [64]
  top_mlp: [1]
  tables:
    - {name: product_table, num_embeddings: 4096}
    - {name: user_table, num_embeddings: 4096}
runtime: {device: cuda}
)",
                                  {}, "tutorial.yaml");
    const ShardingPlan plan = manual_plan(c.model, c.sharding, env_of(1, 1, "cuda"));
    // The tutorial's output, trailing spaces included.
    const std::string expected =
        "    param     | sharding type | compute kernel | ranks\n"
        "------------- | ------------- | -------------- | -----\n"
        "product_table | table_wise    | fused          | [0]  \n"
        "user_table    | table_wise    | fused          | [0]  \n"
        "\n"
        "    param     | shard offsets | shard sizes |   placement  \n"
        "------------- | ------------- | ----------- | -------------\n"
        "product_table | [0, 0]        | [4096, 64]  | rank:0/cuda:0\n"
        "user_table    | [0, 0]        | [4096, 64]  | rank:0/cuda:0";
    CHECK(plan_table(plan, c.model.tables) == expected);
}

TEST_CASE("plan_table: long rank lists and shard lists can be elided", "[distributed]") {
    const Config c = config_with("sharding: {sharding_type: row_wise}\n");
    const ShardingPlan plan = manual_plan(c.model, c.sharding, env_of(10, 10));
    const std::string full = plan_table(plan, c.model.tables);
    CHECK_THAT(full, Contains("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"));
    CHECK_THAT(full, Contains("| [5, 0]        | [0, 8]      | rank:9/cpu"));
    PlanTableOptions compact;
    compact.max_ranks = 4;
    compact.max_shards_per_table = 4;
    const std::string short_text = plan_table(plan, c.model.tables, compact);
    CHECK_THAT(short_text, Contains("[0, 1, 2, ..., 9]"));
    CHECK_THAT(short_text, Contains("(7 more)"));
    // 5 lines of params, a blank line, 2 header lines and 4 rows for each of the 3 tables.
    CHECK(std::count(short_text.begin(), short_text.end(), '\n') + 1 == 5 + 1 + 2 + 3 * 4);
}
