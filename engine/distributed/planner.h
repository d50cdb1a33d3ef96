// The auto planner (TorchRec's EmbeddingShardingPlanner idea) and the one entry point that turns
// a config into the plan a run uses.
//
// Planning, for a config and a topology:
//   1. enumerate each table's options: table_wise; row_wise (W > 1); table_row_wise (more than one
//      node of more than one rank); column_wise into k = 2, 4, 8, ... <= W even shards of at least
//      kMinColumnWidth columns, a multiple of 4; data_parallel (W > 1). A sharding.tables entry
//      narrows them: its sharding_type keeps that type only (with its column_widths; also where
//      the planner would not propose it: row_wise on one rank, column_wise into narrower
//      shards), its ranks pin the placement; compute_kernel dense (there or in
//      the section) keeps data_parallel only, the one type that has the dense kernel.
//   2. cost every option with CostModel (planner_estimate.h): memory and time per shard, plus
//      what every rank pays.
//   3. partition greedily: pinned tables first, then the others by their dominant share (the
//      larger of their time and their memory as fractions of all tables'), largest first. Each
//      table takes the option and placement that give the lowest resulting slowest-rank time
//      (ties: the least total work), placing shards on the least-loaded ranks (by time) that
//      still have the memory, distinct ranks for column_wise, the best node for table_row_wise.
//   4. when no option fits, fail naming the table, what each option needs per rank and the most
//      free memory any rank has (and, when even a perfect packing cannot fit, the totals).
#pragma once

#include <map>
#include <string>

#include "engine/config/config.h"
#include "engine/distributed/planner_estimate.h"
#include "engine/distributed/sharding_plan.h"
#include "engine/distributed/topology.h"

namespace shardrec {

// The planner proposes column_wise shards no narrower than this (TorchRec uses 128 for its GPU
// kernels' efficiency; 32 keeps a 128-wide table splittable into 4).
constexpr int64_t kMinColumnWidth = 32;

class EmbeddingShardingPlanner {
public:
    // stats: the cached tables' ids measured on the data, for their miss time (CostModel).
    explicit EmbeddingShardingPlanner(Topology topology, const CacheStatistics* stats = nullptr)
        : topology_(std::move(topology)), stats_(stats) {}

    // The plan for config's model on the topology, honouring config.sharding.tables as
    // constraints. Throws Error when the tables cannot fit.
    ShardingPlan plan(const Config& config) const;

private:
    Topology topology_;
    const CacheStatistics* stats_;
};

// The plan a run uses: sharding.plan_file when set (checked against the model and the world),
// the auto planner when sharding.planner is auto, else manual_plan. Always passes check_plan
// and check_tier_budgets. stats: as the auto planner takes them.
ShardingPlan make_sharding_plan(const Config& config,
                                const Topology& topology,
                                const CacheStatistics* stats = nullptr);

// Each rank's key_value rows (all written) against the topology's disk_gib and, on cuda, its
// fused_uvm rows against its DDR. Throws Error naming the rank, its tables there with their
// sizes and the budget; nothing is checked for a budget of 0 (disk_gib not given).
void check_tier_budgets(const ShardingPlan& plan, const Config& config, const Topology& topology);

// sharding.replica_groups R (2D parallelism, TorchRec DMPCollection): the size G = world / R of
// a sharding group, the ranks [g*G, (g+1)*G) that one plan for G ranks is made for; the planner
// plans within a group. A group must not straddle a node of local_size ranks: G is a multiple
// of local_size (whole nodes) or divides it (a part of one node). Throws Error naming the key
// otherwise, or when R does not divide the world size.
int sharding_group_size(const ShardingConfig& sharding, int world_size, int local_size);

// One process trains every table whole, so the sharding section's rank lists go unchecked there:
// logs where they are checked, when an entry has one.
void note_unchecked_rank_lists(const ShardingConfig& sharding);

// A text report of an estimate: the memory limit, per-rank memory and time (lookup | comm | dense
// | total), all ranks when there are at most max_rank_rows, else the slowest few, the least
// loaded and a min / median / max summary; then the predicted step time and samples/s.
std::string estimate_report(const PlanEstimate& estimate,
                            const Config& config,
                            const Topology& topology,
                            size_t max_rank_rows = 16);

// The expected hit rate of a cache holding `slots` of a table's E rows, per batch of `ids` ids
// drawn from the synthetic data's Zipf law (alpha): the distinct rows of a batch that are
// among the `slots` most popular, over the distinct rows of a batch, each row r appearing with
// probability 1 - (1 - p_r)^ids. An ideal (frequency-ordered) cache reaches it; LRU less.
double predicted_hit_rate(int64_t rows, int64_t slots, double alpha, double ids);

// key_value tables (empty when there are none): per table its rows, cache slots and their DRAM,
// the disk its rows take once all are written, the ids of a global batch, the predicted hit rate
// (synthetic data: its law; other data: `stats`, measured on a sample of it; "-" without them)
// and, when `measured` has the table, a run's measured one (metrics.jsonl).
std::string cache_report(const ShardingPlan& plan,
                         const Config& config,
                         const std::map<std::string, double>& measured,
                         const CacheStatistics* stats = nullptr);

// Managed-collision tables (empty when there are none): per table its buckets, slots a bucket,
// the rank that keeps each bucket's remap state (bucket_owner) and the most slot-map bytes on
// one rank.
std::string managed_collision_report(const ShardingPlan& plan, const Config& config);

}  // namespace shardrec
