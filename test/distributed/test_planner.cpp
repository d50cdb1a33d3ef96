// The auto planner and its cost model: balance, memory limits, constraints, clear failures,
// the MLPerf config at scale, and make_sharding_plan's three sources.
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "engine/core/error.h"
#include "engine/distributed/planner.h"
#include "test/support/compare.h"

using shardrec::test::error_of;

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

std::filesystem::path repo_root() {
    // This file is test/distributed/test_planner.cpp.
    return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

// `n` equal tables of 100000 x 16 f32 rows (6.4 MB each), SGD (no optimizer state).
std::string equal_tables(int n, const std::string& sharding = "") {
    std::string text = R"(train: {steps: 1}
data: {batch_size: 64}
model:
  type: dlrm
  embedding_dim: 16
  bottom_mlp: [16]
  top_mlp: [1]
  tables:
)";
    for (int i = 0; i < n; ++i) {
        text += fmt::format("    - {{name: t{}, num_embeddings: 100000}}\n", i);
    }
    return text + "optimizer: {sparse: {type: sgd}}\n" + sharding;
}

Topology cpu_topology(int world_size, double memory_gib = 10.0, int local_size = 4) {
    return parse_topology(fmt::format("compute_device: cpu\nlocal_size: {}\nhost_memory_gib: {}\n"
                                      "reserved_fraction: 0.0\n",
                                      local_size, memory_gib),
                          world_size, "cpu.yaml");
}

std::map<int, int> tables_per_rank(const ShardingPlan& plan) {
    std::map<int, int> count;
    for (const auto& [name, ps] : plan.tables) {
        REQUIRE(ps.sharding_type == ShardingType::kTableWise);
        ++count[ps.ranks[0]];
    }
    return count;
}

}  // namespace

TEST_CASE("Planner: equal tables go table_wise, evenly over the ranks", "[distributed]") {
    const Config c = parse_config(equal_tables(8), {}, "t.yaml");
    const Topology topo = cpu_topology(4);
    const ShardingPlan plan = EmbeddingShardingPlanner(topo).plan(c);
    CHECK(tables_per_rank(plan) == std::map<int, int>{{0, 2}, {1, 2}, {2, 2}, {3, 2}});
    const PlanEstimate e = estimate_plan(plan, c, topo);
    for (const RankCost& r : e.ranks) {
        CHECK(r.total_s() <= e.step_time_s());
        CHECK(r.total_s() >= 0.99 * e.step_time_s());  // balanced
        CHECK(r.lookup_s > 0);
        CHECK(r.comm_s > 0);
        CHECK(r.dense_s > 0);
    }
}

TEST_CASE("Planner: the per-rank memory limit is respected", "[distributed]") {
    // 12 MiB per rank: one 6.4 MB table and its buffers fit, two do not.
    const Config c = parse_config(equal_tables(4), {}, "t.yaml");
    const Topology topo = cpu_topology(4, 12.0 / 1024);
    const ShardingPlan plan = EmbeddingShardingPlanner(topo).plan(c);
    const PlanEstimate e = estimate_plan(plan, c, topo);
    CHECK(e.max_memory_bytes() <= topo.memory_limit_bytes());
    CHECK(e.max_memory_bytes() > topo.memory_limit_bytes() / 2);
    // With room for everything on a rank, the same tables still spread for time.
    const ShardingPlan roomy = EmbeddingShardingPlanner(cpu_topology(4)).plan(c);
    CHECK(tables_per_rank(roomy).size() == 4);
}

TEST_CASE("Planner: fails clearly when the tables cannot fit", "[distributed]") {
    const Config c = parse_config(equal_tables(8), {}, "t.yaml");
    const std::string total =
        error_of([&] { EmbeddingShardingPlanner(cpu_topology(4, 12.0 / 1024)).plan(c); });
    CHECK_THAT(total, Contains("the model does not fit"));
    CHECK_THAT(total, Contains("the 4 ranks have 4 x 12.0 MiB = 48.0 MiB"));
    CHECK_THAT(total, Contains("of DDR"));
    // Two tables pinned to one rank that holds only one: the second cannot be placed.
    const Config pinned = parse_config(equal_tables(2, R"(sharding:
  planner: auto
  tables:
    - {name: t0, sharding_type: table_wise, ranks: [1]}
    - {name: t1, sharding_type: table_wise, ranks: [1]}
)"),
                                       {}, "t.yaml");
    const std::string place =
        error_of([&] { EmbeddingShardingPlanner(cpu_topology(4, 12.0 / 1024)).plan(pinned); });
    CHECK_THAT(place, Contains("cannot place table 't1' [100000, 16] on 4 ranks"));
    CHECK_THAT(place, Contains("table_wise (1 shard) needs 6.1 MiB on a rank"));
    CHECK_THAT(place, Contains("the most free DDR on any rank is"));
}

TEST_CASE("Planner: config entries pin ranks and narrow the types", "[distributed]") {
    const Config c = parse_config(equal_tables(4, R"(sharding:
  planner: auto
  tables:
    - {name: t0, sharding_type: table_wise, ranks: [3]}
    - {name: t1, sharding_type: row_wise}
    - {name: t2, sharding_type: table_row_wise, ranks: [2]}
    - {name: t3, compute_kernel: dense}
)"),
                                  {}, "t.yaml");
    const ShardingPlan plan = EmbeddingShardingPlanner(cpu_topology(4, 10.0, 2)).plan(c);
    CHECK(plan.at("t0").ranks == std::vector<int>{3});
    CHECK(plan.at("t1").sharding_type == ShardingType::kRowWise);
    CHECK(plan.at("t2").sharding_type == ShardingType::kTableRowWise);
    CHECK(plan.at("t2").ranks == std::vector<int>{2, 3});  // the node of rank 2
    // compute_kernel dense keeps data_parallel only, the one type with the dense kernel.
    CHECK(plan.at("t3").sharding_type == ShardingType::kDataParallel);
    CHECK(plan.at("t3").compute_kernel == EmbeddingComputeKernel::kDense);
}

TEST_CASE("Planner: only data_parallel is costed with the dense kernel", "[distributed]") {
    // The section's dense makes every table data_parallel, even on one rank where the planner
    // would not propose it; without it no sharded table gets the dense kernel.
    const Config dense = parse_config(
        equal_tables(3, "sharding: {planner: auto, compute_kernel: dense}\n"), {}, "t.yaml");
    for (int world : {1, 4}) {
        const ShardingPlan plan = EmbeddingShardingPlanner(cpu_topology(world)).plan(dense);
        for (const auto& [name, ps] : plan.tables) {
            INFO(name << " on " << world);
            CHECK(ps.sharding_type == ShardingType::kDataParallel);
            CHECK(ps.compute_kernel == EmbeddingComputeKernel::kDense);
        }
    }
    const Config fused = parse_config(equal_tables(3, "sharding: {planner: auto}\n"), {}, "t.yaml");
    const ShardingPlan plan = EmbeddingShardingPlanner(cpu_topology(4)).plan(fused);
    for (const auto& [name, ps] : plan.tables) {
        INFO(name);
        CHECK((ps.sharding_type == ShardingType::kDataParallel) ==
              (ps.compute_kernel == EmbeddingComputeKernel::kDense));
    }
}

TEST_CASE("Planner: a type the config asks for is planned even where it would not propose it",
          "[distributed]") {
    // 16 columns are below kMinColumnWidth per shard; one rank makes row_wise degenerate.
    const Config c = parse_config(equal_tables(2, R"(sharding:
  planner: auto
  tables:
    - {name: t0, sharding_type: column_wise}
    - {name: t1, sharding_type: row_wise}
)"),
                                  {}, "t.yaml");
    const ShardingPlan two = EmbeddingShardingPlanner(cpu_topology(2)).plan(c);
    CHECK(two.at("t0").sharding_type == ShardingType::kColumnWise);
    CHECK(two.at("t0").sharding_spec.size() == 2);
    CHECK(two.at("t0").sharding_spec[1].shard_sizes == std::array<int64_t, 2>{100000, 8});
    const ShardingPlan one = EmbeddingShardingPlanner(cpu_topology(1)).plan(c);
    CHECK(one.at("t1").sharding_type == ShardingType::kRowWise);
    CHECK(one.at("t1").ranks == std::vector<int>{0});
}

TEST_CASE("CostModel: dense FLOPs, parameters and largest layer of the MLPerf DLRM-DCNv2",
          "[distributed]") {
    const Config c = load_config((repo_root() / "configs" / "dlrm_dcnv2_mlperf.yaml").string(), {});
    // bottom 13-512-256-128, 3 low-rank (512) cross layers on 27 x 128, top
    // 3456-1024-1024-512-256-1
    CHECK(CostModel::dense_flops_per_sample(c.model) == 32102400.0);
    CHECK(CostModel::dense_parameters(c.model) == 16044545);
    // The top MLP's first layer outweighs a cross layer's [3456, 512] projection.
    CHECK(CostModel::largest_linear(c.model) == std::array<int64_t, 2>{3456, 1024});
    ModelConfig narrow_top = c.model;
    narrow_top.top_mlp = {256, 1};
    CHECK(CostModel::largest_linear(narrow_top) == std::array<int64_t, 2>{3456, 512});
}

TEST_CASE("CostModel: a batch's embedding traffic counts each touched row once", "[distributed]") {
    const Config c = parse_config(R"(train: {steps: 1}
data: {batch_size: 2}
model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [4]
  top_mlp: [1]
  tables:
    - {name: t0, num_embeddings: 10, feature_names: [a, b]}
    - {name: t1, num_embeddings: 10, data_type: f16, weighted: true, feature_names: [c]}
optimizer: {sparse: {type: adagrad}}
)",
                                  {}, "t.yaml");
    // a: bags [5, 5] and [7]; b: [] and [5]; c: [3] and [4], weighted. t0 touches rows 5 and 7,
    // t1 rows 3 and 4.
    const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_sync(
        {"a", "b", "c"}, Tensor::from_vector<int64_t>({5, 5, 7, 5, 3, 4}),
        Tensor::from_vector<int64_t>({2, 1, 0, 1, 1, 1}),
        Tensor::from_vector<float>({1, 1, 1, 1, 0.5f, 2}));
    const SparseTraffic t = CostModel::sparse_traffic(c, kjt);
    CHECK(t.ids == 6);
    CHECK(t.rows_touched == 4);
    // Per id its row (t0: 16 B of f32, t1: 8 B of f16) and its id (8 B, + 4 B of weight for c);
    // per feature 2 lengths (8 B each) and 2 pooled rows of f32 written (32 B).
    //   a: 3 * 24 + 16 + 32 = 120;  b: 24 + 16 + 32 = 72;  c: 2 * 20 + 16 + 32 = 88.
    CHECK(t.lookup_bytes == 280.0);
    // Per feature the pooled gradients, ids and lengths read; per touched row its row and its
    // Adagrad state (4 B per element) read and written once.
    //   a: 32 + 24 + 16 = 72;  b: 32 + 8 + 16 = 56;  c: 32 + 24 + 16 = 72;
    //   t0 rows: 2 * 2 * (16 + 16) = 128;  t1 rows: 2 * 2 * (8 + 16) = 96.
    CHECK(t.update_bytes == 424.0);
}

TEST_CASE("CostModel: row_wise splits the lookups, table_wise has no comm on one rank",
          "[distributed]") {
    const Config c = parse_config(equal_tables(1), {}, "t.yaml");
    const ModelConfig::Table& t = c.model.tables[0];
    const CostModel one(c, cpu_topology(1));
    const OptionCost tw =
        one.table_cost(t, ShardingType::kTableWise, EmbeddingComputeKernel::kFused, {{100000, 16}});
    CHECK(tw.shards[0].comm_s == 0);
    CHECK(tw.every_rank.comm_s == 0);
    CHECK(tw.shards[0].memory_bytes >= 100000 * 16 * 4);
    const CostModel four(c, cpu_topology(4));
    const OptionCost rw = four.table_cost(t, ShardingType::kRowWise, EmbeddingComputeKernel::kFused,
                                          {{25000, 16}, {25000, 16}, {25000, 16}, {25000, 16}});
    const OptionCost tw4 = four.table_cost(t, ShardingType::kTableWise,
                                           EmbeddingComputeKernel::kFused, {{100000, 16}});
    // Each row shard still writes (and reads back the gradient of) a partial sum for every bag.
    CHECK(rw.shards[0].lookup_s < tw4.shards[0].lookup_s);
    CHECK(rw.shards[0].memory_bytes < tw4.shards[0].memory_bytes / 2);
    CHECK(rw.every_rank.comm_s == 0);  // the reduce-scatter is in the shards
    CHECK(tw4.every_rank.comm_s > 0);
    const OptionCost dp =
        four.table_cost(t, ShardingType::kDataParallel, EmbeddingComputeKernel::kDense, {});
    CHECK(dp.shards.size() == 4);
    CHECK(dp.shards[0].comm_s > tw4.shards[0].comm_s);  // a 6.4 MB all-reduce
}

TEST_CASE("CostModel: comm.qcomms and comm.hierarchical cost what they send", "[distributed]") {
    // 2 nodes of 4 ranks, the link between nodes 10x slower than inside one.
    const Topology topo = parse_topology(
        "compute_device: cpu\nlocal_size: 4\nhost_memory_gib: 10\nreserved_fraction: 0.0\n"
        "intra_node_bw_gbps: 100\ncross_node_bw_gbps: 10\n",
        8, "cpu.yaml");
    const auto model = [&](const std::string& comm) {
        return CostModel(parse_config(equal_tables(1, comm), {}, "t.yaml"), topo);
    };
    const std::string fp16 = "comm: {qcomms: {forward: fp16, backward: fp16}, "
                             "allreduce_precision: bf16}\n";
    const CostModel m32 = model(""), m16 = model(fp16),
                    m8 = model("comm: {qcomms: {forward: fp8, backward: fp8}}\n");
    const Config c = parse_config(equal_tables(1), {}, "t.yaml");
    const ModelConfig::Table& t = c.model.tables[0];
    const auto tw = [&](const CostModel& m) {
        return m.table_cost(t, ShardingType::kTableWise, EmbeddingComputeKernel::kFused,
                            {{100000, 16}});
    };
    // Pooled rows of 16 values: 64 bytes in fp32, 32 in fp16, 16 + 4 in fp8 (a scale a row).
    CHECK(tw(m16).every_rank.comm_s == Approx(tw(m32).every_rank.comm_s / 2));
    CHECK(tw(m8).every_rank.comm_s == Approx(tw(m32).every_rank.comm_s * 20 / 64));
    // The shard's gradients shrink the same way; its ids do not.
    const double ids_s = tw(m32).shards[0].comm_s - 2 * (tw(m32).shards[0].comm_s -
                                                         tw(m16).shards[0].comm_s);
    CHECK(ids_s > 0);
    CHECK(tw(m8).shards[0].comm_s - ids_s ==
          Approx((tw(m32).shards[0].comm_s - ids_s) * 20 / 64));
    CHECK(m16.dense_cost().comm_s == Approx(m32.dense_cost().comm_s / 2));  // bf16 gradients

    // row_wise on 2 nodes: auto is hierarchical, which sends 1/4 of the rows between nodes.
    const std::vector<std::array<int64_t, 2>> rows(8, {12500, 16});
    const auto rw = [&](const CostModel& m) {
        return m.table_cost(t, ShardingType::kRowWise, EmbeddingComputeKernel::kFused, rows)
            .shards[0]
            .comm_s;
    };
    const double flat = rw(model("comm: {hierarchical: \"false\"}\n"));
    const double hier = rw(model("comm: {hierarchical: \"true\"}\n"));
    CHECK(rw(m32) == hier);
    CHECK(hier < flat / 2);
    // One node: nothing to gain, auto stays flat.
    const Topology one_node = cpu_topology(4);
    CHECK(CostModel(c, one_node)
              .table_cost(t, ShardingType::kRowWise, EmbeddingComputeKernel::kFused,
                          {{25000, 16}, {25000, 16}, {25000, 16}, {25000, 16}})
              .shards[0]
              .comm_s ==
          CostModel(parse_config(equal_tables(1, "comm: {hierarchical: \"false\"}\n"), {},
                                 "t.yaml"),
                    one_node)
              .table_cost(t, ShardingType::kRowWise, EmbeddingComputeKernel::kFused,
                          {{25000, 16}, {25000, 16}, {25000, 16}, {25000, 16}})
              .shards[0]
              .comm_s);
}

TEST_CASE("Planner: the MLPerf config at 8, 64 and 1024 ranks, each within a second",
          "[distributed]") {
    const Config c = load_config((repo_root() / "configs" / "dlrm_dcnv2_mlperf.yaml").string(), {});
    for (int world : {8, 64, 1024}) {
        INFO("world size " << world);
        const Topology topo = default_topology("cuda", world);
        const auto t0 = std::chrono::steady_clock::now();
        const ShardingPlan plan = EmbeddingShardingPlanner(topo).plan(c);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        CHECK(seconds < 1.0);
        CHECK_NOTHROW(check_plan(plan, c.model.tables));
        const PlanEstimate e = estimate_plan(plan, c, topo);
        CHECK(e.ranks.size() == static_cast<size_t>(world));
        CHECK(e.max_memory_bytes() <= topo.memory_limit_bytes());
        CHECK(e.step_time_s() > 0);
        CHECK_THAT(estimate_report(e, c, topo), Contains("predicted step:"));
    }
    CHECK_THAT(error_of([&] { EmbeddingShardingPlanner(default_topology("cuda", 1)).plan(c); }),
               Contains("the model does not fit"));
}

TEST_CASE("make_sharding_plan: manual rules, the auto planner, or a plan file", "[distributed]") {
    const Topology topo = cpu_topology(2);
    const Config manual = parse_config(equal_tables(3), {}, "t.yaml");
    const ShardingPlan m = make_sharding_plan(manual, topo);
    CHECK(m == manual_plan(manual.model, manual.sharding, topo.placement()));

    const Config automatic = parse_config(equal_tables(3), {"sharding.planner=auto"}, "t.yaml");
    const ShardingPlan a = make_sharding_plan(automatic, topo);
    CHECK(a == EmbeddingShardingPlanner(topo).plan(automatic));

    const auto path = std::filesystem::temp_directory_path() / "shardrec_test_plan.yaml";
    {
        std::ofstream out(path);
        out << plan_to_yaml(a, automatic.model.tables);
    }
    const Config from_file =
        parse_config(equal_tables(3), {"sharding.plan_file=" + path.string()}, "t.yaml");
    CHECK(make_sharding_plan(from_file, topo) == a);
    CHECK_THAT(error_of([&] { make_sharding_plan(from_file, cpu_topology(4)); }),
               Contains("world_size: the plan is for 2 ranks, this run has 4"));
    std::filesystem::remove(path);
}

TEST_CASE("Plans in configs/plans load for their configs", "[distributed]") {
    const std::filesystem::path configs = repo_root() / "configs";
    const std::vector<std::array<std::string, 3>> plans = {
        {"quickstart_2rank_cpu.yaml", "quickstart.yaml", "cpu"},
        {"dlrm_dcnv2_mlperf_8xh100.yaml", "dlrm_dcnv2_mlperf.yaml", "cuda"},
    };
    for (const auto& [plan_file, config_file, device] : plans) {
        INFO(plan_file);
        const Config c = load_config((configs / config_file).string(), {});
        const std::string path = (configs / "plans" / plan_file).string();
        const Topology topo = resolve_topology("", device, device == "cpu" ? 2 : 8);
        const ShardingPlan plan = load_plan(path, c.model.tables, topo.placement());
        const PlanEstimate e = estimate_plan(plan, c, topo);
        CHECK(e.max_memory_bytes() <= topo.memory_limit_bytes());
    }
}

// The hit-rate prediction: exact for small tables, a 1 % block sum beyond 1e5 ranks that stays
// within 1e-3 of the sum over every rank, 1 for a cache of every row, more slots more hits.
TEST_CASE("predicted_hit_rate: the Zipf law's distinct rows in the cache", "[planner]") {
    const auto exact = [](int64_t rows, int64_t slots, double alpha, double ids) {
        const double e = static_cast<double>(rows);
        const auto cdf = [&](double x) {
            return (std::pow(x, 1.0 - alpha) - 1.0) / (std::pow(e + 1.0, 1.0 - alpha) - 1.0);
        };
        double hits = 0, distinct = 0;
        for (int64_t r = 0; r < rows; ++r) {
            const double p = cdf(static_cast<double>(r) + 2.0) - cdf(static_cast<double>(r) + 1.0);
            const double seen = 1.0 - std::pow(1.0 - p, ids);
            distinct += seen;
            hits += r < slots ? seen : 0.0;
        }
        return hits / distinct;
    };
    CHECK(predicted_hit_rate(1000, 1000, 1.05, 500) == 1.0);
    CHECK(predicted_hit_rate(1000, 50, 1.05, 500) ==
          Approx(exact(1000, 50, 1.05, 500)).epsilon(1e-12));
    for (const int64_t slots : {int64_t{20000}, int64_t{150000}, int64_t{1000000}}) {
        INFO("slots " << slots);
        CHECK(std::fabs(predicted_hit_rate(2000000, slots, 1.05, 4096) -
                        exact(2000000, slots, 1.05, 4096)) < 1e-3);
    }
    CHECK(predicted_hit_rate(2000000, 20000, 1.05, 4096) <
          predicted_hit_rate(2000000, 200000, 1.05, 4096));
}

namespace {

// Four key_value tables of 100000 x 16 f32 rows (SGD: a 72-byte record each, 6.9 MiB per table
// once every row is written) with a cache of `load_factor` of each shard's rows.
Config key_value_tables(double load_factor, const std::string& planner = "manual") {
    return parse_config(equal_tables(4),
                        {"sharding.planner=" + planner, "sharding.compute_kernel=key_value",
                         "sharding.storage.path=/tmp/kv",
                         fmt::format("sharding.cache.load_factor={}", load_factor)},
                        "t.yaml");
}

Topology cpu_disk_topology(int world_size, double disk_gib) {
    return parse_topology(fmt::format("compute_device: cpu\nlocal_size: 2\nhost_memory_gib: 10\n"
                                      "reserved_fraction: 0.0\ndisk_gib: {}\ndisk_bw_gbps: 0.5\n",
                                      disk_gib),
                          world_size, "disk.yaml");
}

}  // namespace

// The miss path: (1 - hit rate) of a batch's distinct rows read from disk and written back, so
// a smaller cache predicts a longer step; a cache of every row misses nothing.
TEST_CASE("Planner tiers: a smaller load_factor predicts more disk miss time", "[planner]") {
    const Topology topo = cpu_disk_topology(2, 100.0);
    std::vector<double> miss_s, step_s;
    for (const double lf : {1.0, 0.5, 0.05}) {
        const Config c = key_value_tables(lf);
        const PlanEstimate e = estimate_plan(make_sharding_plan(c, topo), c, topo);
        double disk = 0;
        for (const RankCost& r : e.ranks) {
            disk += r.disk_s;
            CHECK(r.disk_bytes == 2 * 7200000);  // two tables a rank, 100000 records of 72 B
        }
        miss_s.push_back(disk);
        step_s.push_back(e.step_time_s());
        if (lf == 0.05) {
            const std::string report = estimate_report(e, c, topo);
            CHECK_THAT(report, Contains("| cache misses "));
            CHECK_THAT(report, Contains("storage per rank: DDR (budget 10.00 GiB), disk (budget "
                                        "100.00 GiB)"));
            CHECK_THAT(report, Contains("       0 |      1.5 MiB |     13.7 MiB"));
        }
    }
    CHECK(miss_s[0] == 0.0);
    CHECK(miss_s[1] > 0.0);
    CHECK(miss_s[2] > miss_s[1]);
    CHECK(step_s[2] > step_s[1]);
    CHECK(step_s[1] > step_s[0]);
}

// sharding.cache.prefetch_pipeline: the misses are filled beside the rest of the step, so the
// step is the longer of the two, not their sum; the plan file keeps the flag.
TEST_CASE("Planner tiers: prefetch_pipeline overlaps the misses with the step", "[planner]") {
    const Topology topo = cpu_disk_topology(2, 100.0);
    Config inline_fills = key_value_tables(0.05);
    Config prefetched = key_value_tables(0.05);
    prefetched.sharding.cache.prefetch_pipeline = true;
    const PlanEstimate a =
        estimate_plan(make_sharding_plan(inline_fills, topo), inline_fills, topo);
    const ShardingPlan plan = make_sharding_plan(prefetched, topo);
    const PlanEstimate b = estimate_plan(plan, prefetched, topo);
    REQUIRE(a.ranks.size() == b.ranks.size());
    for (size_t r = 0; r < a.ranks.size(); ++r) {
        const RankCost &x = a.ranks[r], &y = b.ranks[r];
        CHECK(y.disk_s == 0);
        CHECK(y.prefetch_s == x.disk_s);
        const double rest = x.lookup_s + x.comm_s + x.dense_s;
        CHECK(x.total_s() == rest + x.disk_s);
        CHECK(y.total_s() == std::max(rest, y.prefetch_s));
    }
    CHECK(b.step_time_s() < a.step_time_s());
    CHECK_THAT(estimate_report(b, prefetched, topo),
               Contains("beside the step (prefetch_pipeline)"));
    REQUIRE(plan.at("t0").cache_params);
    CHECK(plan.at("t0").cache_params->prefetch_pipeline);
    const std::string file = plan_to_yaml(plan, prefetched.model.tables);
    CHECK_THAT(file, Contains("prefetch_pipeline: true"));
    CHECK(parse_plan(file, prefetched.model.tables, topo.placement()) == plan);
}

// disk_gib is each rank's budget for its key_value rows once all are written: the auto planner
// spreads the tables to fit it or names the table and the most free disk; any other plan is
// refused naming the rank, its tables and their sizes.
TEST_CASE("Planner tiers: a too small disk_gib fails with the tables and sizes", "[planner]") {
    // 13.7 MiB of rows a rank (two tables) against 10 MiB.
    const Topology small = cpu_disk_topology(2, 10.0 / 1024);
    const std::string manual = error_of([&] { make_sharding_plan(key_value_tables(0.1), small); });
    CHECK_THAT(manual, Contains("rank 0 needs 13.7 MiB of disk for its key_value rows once all "
                                "are written ('t0' 6.9 MiB, 't2' 6.9 MiB), the topology gives "
                                "10.0 MiB (disk_gib"));
    const std::string planned =
        error_of([&] { EmbeddingShardingPlanner(small).plan(key_value_tables(0.1, "auto")); });
    CHECK_THAT(planned, Contains("table_wise (1 shard) needs"));
    CHECK_THAT(planned, Contains("and 6.9 MiB of disk on a rank"));
    CHECK_THAT(planned, Contains("the most free disk (disk_gib) is"));
    // Not given (0): not checked; enough: the auto planner fits the rows on the disks.
    CHECK_NOTHROW(make_sharding_plan(key_value_tables(0.1), cpu_disk_topology(2, 0.0)));
    const Topology enough = cpu_disk_topology(2, 15.0 / 1024);
    const ShardingPlan plan = EmbeddingShardingPlanner(enough).plan(key_value_tables(0.1, "auto"));
    const Config c = key_value_tables(0.1, "auto");
    CHECK(estimate_plan(plan, c, enough).max_disk_bytes() <= enough.disk_limit_bytes());
}

// fused_uvm on a GPU: the rows and their state count in DDR, not HBM, and their lookups cross
// the host link, slower than HBM.
TEST_CASE("Planner tiers: fused_uvm rows in DDR, read over the host link", "[planner]") {
    const Topology topo = default_topology("cuda", 8);
    const ModelConfig::Table table = [] {
        ModelConfig::Table t;
        t.name = "t";
        t.num_embeddings = 1000000;
        t.embedding_dim = 64;
        t.feature_names = {"f"};
        return t;
    }();
    Config c = parse_config(equal_tables(1), {"runtime.device=cuda"}, "t.yaml");
    c.model.tables = {table};
    const CostModel model(c, topo);
    const std::vector<std::array<int64_t, 2>> whole{{1000000, 64}};
    const OptionCost fused =
        model.table_cost(table, ShardingType::kTableWise, EmbeddingComputeKernel::kFused, whole);
    const OptionCost uvm =
        model.table_cost(table, ShardingType::kTableWise, EmbeddingComputeKernel::kFusedUvm, whole);
    const double storage =
        model.shard_storage_bytes(table, EmbeddingComputeKernel::kFusedUvm, 1000000, 64);
    CHECK(storage == 256000000.0);  // f32 rows, SGD
    CHECK(uvm.shards[0].host_bytes == 256000000);
    CHECK(fused.shards[0].host_bytes == 0);
    CHECK(fused.shards[0].memory_bytes - uvm.shards[0].memory_bytes == 256000000);
    CHECK(uvm.shards[0].lookup_s > fused.shards[0].lookup_s);
    CHECK(uvm.shards[0].disk_bytes == 0);
}

// fused_uvm_caching on a GPU: the cache (and its index) in HBM, the rows in DDR, no disk; the
// misses cross the host link, fewer (a shorter miss time) with a larger cache.
TEST_CASE("Planner tiers: fused_uvm_caching caches in HBM, rows in DDR", "[planner]") {
    const Topology topo = default_topology("cuda", 8);
    const auto cost = [&](double load_factor) {
        Config c = parse_config(equal_tables(1),
                                {"runtime.device=cuda", "sharding.compute_kernel=fused_uvm_caching",
                                 "sharding.cache.load_factor=" + std::to_string(load_factor)},
                                "t.yaml");
        ModelConfig::Table& t = c.model.tables[0];
        t.num_embeddings = 1000000;
        t.embedding_dim = 64;
        const CostModel model(c, topo);
        return model
            .table_cost(t, ShardingType::kTableWise, EmbeddingComputeKernel::kFusedUvmCaching,
                        {{1000000, 64}})
            .shards[0];
    };
    const RankCost small = cost(0.01), large = cost(0.5);
    // SGD: a 256-byte row, its record 264 bytes (with the checksum and magic of a stored row).
    CHECK(small.host_bytes == 264000000);
    CHECK(small.disk_bytes == 0);
    CHECK(small.memory_bytes < 256000000 / 10);  // the cache, not the rows
    CHECK(large.memory_bytes > small.memory_bytes);
    CHECK(small.disk_s > large.disk_s);
    CHECK(large.disk_s > 0);
}

TEST_CASE("CacheStatistics: a sample's distinct rows and an ideal cache's hit rate",
          "[distributed]") {
    // Uses: row 1 three times, row 2 twice, rows 3 and 4 once. Rows 3 and 4 are in one batch
    // only: first touches, misses whatever the cache.
    const TableIdStatistics s({{1, 1, 2}, {1, 3}, {2, 4}});
    CHECK(s.batches() == 3);
    CHECK(s.ids_per_batch() == Approx(7.0 / 3.0));
    CHECK(s.distinct_per_batch() == Approx(2.0));
    // The batches' distinct rows ranked: {1: 0, 2: 1}, {1: 0, 3: miss}, {2: 1, 4: miss}.
    CHECK(s.hit_rate(0) == 0.0);
    CHECK(s.hit_rate(1) == Approx(2.0 / 6.0));
    CHECK(s.hit_rate(2) == Approx(4.0 / 6.0));
    CHECK(s.hit_rate(100) == Approx(4.0 / 6.0));
    CHECK(TableIdStatistics().hit_rate(5) == 1.0);  // nothing sampled: nothing missed
}

TEST_CASE("CostModel: a cached table's misses follow the measured statistics", "[distributed]") {
    // A key_value table of 1000 rows with a 10 % cache: sampled batches that share 16 rows hit
    // every distinct row; batches whose rows are never reused miss them all.
    const Config c = parse_config(R"(
train: {steps: 1}
data: {type: criteo_binary, batch_size: 4, criteo_binary: {path: /nonexistent}}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [8]
  top_mlp: [8, 1]
  tables: [{name: t, num_embeddings: 1000, pooling_factor: 2}]
sharding: {compute_kernel: key_value, storage: {path: /tmp}, cache: {load_factor: 0.1}}
)",
                                  {}, "t.yaml");
    const Topology topo = resolve_topology("", "cpu", 1);
    std::vector<std::vector<int64_t>> reused, fresh;
    for (int64_t b = 0; b < 8; ++b) {
        reused.push_back({});
        fresh.push_back({});
        for (int64_t i = 0; i < 8; ++i) {
            reused.back().push_back((b * 8 + i) % 16);
            fresh.back().push_back(b * 8 + i);
        }
    }
    const ModelConfig::Table& t = c.model.tables[0];
    const auto miss = [&](const std::vector<std::vector<int64_t>>& batches) {
        const CacheStatistics stats{{"t", TableIdStatistics(batches)}};
        return CostModel(c, topo, &stats).miss_s(t, EmbeddingComputeKernel::kKeyValue, 1000, 8, 8);
    };
    const double uniform =
        CostModel(c, topo).miss_s(t, EmbeddingComputeKernel::kKeyValue, 1000, 8, 8);
    CHECK(uniform > 0);
    CHECK(miss(fresh) > uniform);  // every distinct row a miss
    CHECK(miss(reused) == 0.0);
}
