// Sharding vocabulary, with TorchRec's names: how one embedding table is split over ranks
// (ShardingType), which lookup kernel serves it (EmbeddingComputeKernel; both named in
// engine/config/sharding_names.h, which the config reader uses), where each piece lives
// (ShardMetadata) and the whole decision for one table (ParameterSharding). The shard layouts are
// TorchRec's exactly, so a plan reads the same here and there:
//
//   table_wise      one shard [E, D] on ranks[0].
//   row_wise        W shards over ranks 0..W-1, rows in blocks of ceil(E / W); shard r holds rows
//                   [r*bs, min((r+1)*bs, E)). The last shards may be smaller or EMPTY (E = 5, W = 4
//                   gives 2, 2, 1, 0 rows); an empty shard keeps offset [E, 0] and size [0, D] and
//                   its rank still joins every collective with empty buffers.
//   column_wise     k shards [E, w_i] at column offsets sum(w_0..w_{i-1}), shard i on ranks[i]
//                   (ranks may repeat). Widths are given, or the even split: floor(D / k) each, the
//                   last shard also takes the remainder (TorchRec puts the residual last).
//   table_row_wise  row_wise inside ONE node: local_size shards on the node's ranks
//                   [n*L, n*L + L), blocks of ceil(E / L).
//   data_parallel   the whole table replicated on every rank; ranks lists all W ranks and, as in
//                   TorchRec, sharding_spec is empty (no shard rows in the plan table).
//
// `ranks` always holds the rank of each shard in sharding_spec order (what TorchRec's planner
// writes), so for table_row_wise ranks[0] is the node's first rank, as ParameterSharding documents.
// Letters: E rows, D columns, W world size, L local size (ranks per node), k column shards.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/sharding_names.h"

namespace shardrec {

// Where shards go: world size, ranks per node and the compute device, which together give
// TorchRec's placement strings ("rank:3/cpu", "rank:3/cuda:3" with local_size 8).
struct PlacementEnv {
    int world_size = 1;
    int local_size = 1;                  // ranks per node; divides world_size
    std::string compute_device = "cpu";  // cpu | cuda

    int num_nodes() const { return world_size / local_size; }

    int node_of(int rank) const { return rank / local_size; }

    // "cpu", or "cuda:<rank % local_size>" (each rank drives its node-local GPU).
    std::string device_of(int rank) const;
    // Throws Error unless world_size >= 1, local_size >= 1 divides it, and the device is known.
    void check() const;
};

// One shard of a table (torch.distributed ShardMetadata).
struct ShardMetadata {
    std::array<int64_t, 2> shard_offsets{0, 0};  // [first row, first column]
    std::array<int64_t, 2> shard_sizes{0, 0};    // [rows, columns]
    int rank = 0;
    std::string device = "cpu";  // "cpu" or "cuda:N"

    std::string placement() const { return "rank:" + std::to_string(rank) + "/" + device; }

    int64_t numel() const { return shard_sizes[0] * shard_sizes[1]; }

    bool operator==(const ShardMetadata& other) const;

    bool operator!=(const ShardMetadata& other) const { return !(*this == other); }
};

// "rank:3/cuda:3" -> rank 3, device "cuda:3"; nullopt when malformed.
std::optional<ShardMetadata> parse_placement(const std::string& placement);

// The sharding decision for one table (TorchRec ParameterSharding).
struct ParameterSharding {
    ShardingType sharding_type = ShardingType::kTableWise;
    EmbeddingComputeKernel compute_kernel = EmbeddingComputeKernel::kFused;
    std::vector<int> ranks;                    // rank of each shard (data_parallel: all ranks)
    std::vector<ShardMetadata> sharding_spec;  // the shards; empty for data_parallel
    std::optional<CacheParams> cache_params;   // key_value

    // The shards that live on `rank` (column_wise may put several on one rank).
    std::vector<ShardMetadata> shards_on(int rank) const;

    bool operator==(const ParameterSharding& other) const;

    bool operator!=(const ParameterSharding& other) const { return !(*this == other); }
};

// ---- layouts ----

// ceil(rows / num_shards): TorchRec's row-wise block size (also the bucketize block size).
int64_t row_block_size(int64_t rows, int64_t num_shards);
// Rows of each of num_shards row blocks: [bs, ..., bs, rest, 0, ..., 0] with bs = ceil(E / n).
std::vector<int64_t> row_wise_shard_rows(int64_t rows, int64_t num_shards);
// The even column split: floor(cols / k) each, the remainder on the last; needs 1 <= k <= cols.
std::vector<int64_t> even_column_widths(int64_t cols, int64_t num_shards);

// 0, 1, ..., world_size - 1.
std::vector<int> all_ranks(int world_size);
// The ranks of node `node`: node*L ... node*L + L - 1.
std::vector<int> node_ranks(int node, int local_size);

// Ranks as a config gives them, as the full list of shard ranks: table_row_wise also accepts
// only its node's first rank (what TorchRec's ParameterSharding.ranks holds) and gets the whole
// node; anything else is returned as is.
std::vector<int> expand_ranks(ShardingType type,
                              const std::vector<int>& ranks,
                              const PlacementEnv& env);

// Why these arguments cannot shard a [rows, cols] table as `type` on env ("" when they can):
// ranks outside [0, W); table_wise without exactly one rank; row_wise or data_parallel not on
// all_ranks; table_row_wise not on one whole node; column_wise with 0 or more than cols shards,
// or widths that are not one per shard, each >= 1, adding up to cols; widths for another type;
// data_parallel with the fused kernel (TorchRec trains data-parallel tables densely).
std::string sharding_problem(ShardingType type,
                             EmbeddingComputeKernel kernel,
                             int64_t rows,
                             int64_t cols,
                             const std::vector<int>& ranks,
                             const std::vector<int64_t>& column_widths,
                             const PlacementEnv& env);

// The table's shards for `type` on `ranks` (see the top of this file for what ranks each type
// takes), with column_widths for column_wise (empty: even_column_widths over ranks.size()
// shards). Throws Error with sharding_problem's message when the arguments do not fit.
ParameterSharding make_parameter_sharding(ShardingType type,
                                          EmbeddingComputeKernel kernel,
                                          int64_t rows,
                                          int64_t cols,
                                          const std::vector<int>& ranks,
                                          const std::vector<int64_t>& column_widths,
                                          const PlacementEnv& env);

// Why `ps` is not the layout make_parameter_sharding gives for its type, kernel and ranks on a
// [rows, cols] table ("" when it is); column_wise widths are taken from its shards. Names the
// first shard that differs, as "shard 2: got offsets [..] sizes [..] on rank:2/cpu, expected ...".
std::string layout_problem(const ParameterSharding& ps,
                           int64_t rows,
                           int64_t cols,
                           const PlacementEnv& env);

}  // namespace shardrec
