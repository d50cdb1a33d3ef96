// ShardingPlan: the ParameterSharding of every embedding table, for one world (TorchRec's
// EmbeddingModuleShardingPlan; shardrec has one sharded module, so no module paths). Made from the
// config's sharding section (manual rules), by the auto planner (planner.h) or read from a plan
// file; printed as TorchRec prints a plan.
//
// Manual rules (sharding.planner: manual), for a table without explicit ranks:
//   table_wise      the next rank of one round-robin counter over the table_wise and
//                   column_wise tables, in model order;
//   column_wise     k = min(W, D) shards on the counter's next k ranks (mod W), even widths or
//                   the entry's column_widths (then k = their count);
//   table_row_wise  node (n mod num_nodes) for the n-th such table;
//   row_wise, data_parallel: every rank.
// Explicit ranks must fit the type (sharding_types.h: sharding_problem); table_row_wise may give
// only its node's first rank (expand_ranks).
//
// Plan file (`shardrec plan --out`, sharding.plan_file), read strictly (errors name path, line):
//   world_size: 8
//   local_size: 8
//   compute_device: cuda
//   tables:
//     - name: t_cat_0
//       sharding_type: row_wise
//       compute_kernel: fused
//       ranks: [0, 1, 2, 3, 4, 5, 6, 7]
//       shards:
//         - {shard_offsets: [0, 0], shard_sizes: [5000000, 128], placement: rank:0/cuda:0}
//         ...
// The shards must be exactly the TorchRec layout of the type on those ranks (column_wise: the
// widths are taken from the shard sizes), and world size, local size and device must match.
#pragma once

#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/distributed/sharding_types.h"

namespace shardrec {

struct ShardingPlan {
    PlacementEnv env;
    std::map<std::string, ParameterSharding> tables;  // by table name

    // The table's sharding; throws Error naming the closest planned table when absent.
    const ParameterSharding& at(const std::string& table) const;

    bool operator==(const ShardingPlan& other) const;

    bool operator!=(const ShardingPlan& other) const { return !(*this == other); }
};

// The cache of a key_value table from the config (nothing for others).
void set_cache_params(ParameterSharding& ps,
                      const ShardingConfig& sharding,
                      const std::string& table);

// The plan of sharding.planner: manual for env (see the rules above). Throws one Error listing
// every entry that does not fit the world, each with its config file:line.
ShardingPlan manual_plan(const ModelConfig& model,
                         const ShardingConfig& sharding,
                         const PlacementEnv& env);

// Throws one Error listing every problem: a model table without sharding, a planned table that is
// not in the model (with did-you-mean), shards that are not the TorchRec layout of their type and
// ranks for the table's [rows, dim], ranks outside the world.
void check_plan(const ShardingPlan& plan, const std::vector<ModelConfig::Table>& tables);

// The rank that keeps the remap state of a managed-collision bucket whose first row is
// `first_row`: the rank of the table's shard holding that row at column 0; several
// (data_parallel: every rank) take the buckets in turn (bucket mod their number).
int bucket_owner(const ParameterSharding& sharding, int64_t first_row, int64_t bucket);
// The owner of each of a managed-collision table's total_num_buckets buckets (bucket b's first
// row is b * num_embeddings / K); `sharding` null: one process, rank 0 keeps them all.
std::vector<int> bucket_owners(const ParameterSharding* sharding, const ModelConfig::Table& table);

// ---- plan files ----

// Reads a plan file for the model's tables in world env; every problem (unknown keys, unknown or
// missing tables, wrong layouts, another world) is reported at once with file:line.
ShardingPlan load_plan(const std::string& path,
                       const std::vector<ModelConfig::Table>& tables,
                       const PlacementEnv& env);
ShardingPlan parse_plan(const std::string& text,
                        const std::vector<ModelConfig::Table>& tables,
                        const PlacementEnv& env,
                        const std::string& source_name = "<string>");

// The plan as a plan file, tables in model order.
std::string plan_to_yaml(const ShardingPlan& plan, const std::vector<ModelConfig::Table>& tables);

// ---- printing ----

struct PlanTableOptions {
    // Longer rank lists print as "[0, 1, 2, ..., 63]"; tables with more shards print the first
    // two, a "(N more)" row and the last. The defaults print everything, as TorchRec does.
    size_t max_ranks = std::numeric_limits<size_t>::max();
    size_t max_shards_per_table = std::numeric_limits<size_t>::max();
};

// TorchRec's plan print (EmbeddingModuleShardingPlan.__str__), tables in model order:
//       param     | sharding type | compute kernel | ranks
//   ------------- | ------------- | -------------- | -----
//   product_table | table_wise    | fused          | [0]
//   <blank line>
//       param     | shard offsets | shard sizes |   placement
//   ------------- | ------------- | ----------- | -------------
//   product_table | [0, 0]        | [4096, 64]  | rank:0/cuda:0
// Headers centred as Python's str.center, cells left-aligned and padded (trailing spaces kept),
// no trailing newline. data_parallel tables have no shard rows.
std::string plan_table(const ShardingPlan& plan,
                       const std::vector<ModelConfig::Table>& tables,
                       const PlanTableOptions& options = {});

}  // namespace shardrec
