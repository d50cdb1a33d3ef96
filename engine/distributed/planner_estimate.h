// The planner's cost model: per-rank memory and per-step time (forward + backward) of a table
// sharded one way, and of the dense part of the model. Napkin math in bytes over bandwidths, the
// same for every option, so options compare fairly; absolute times are estimates.
//
// Letters: B batch per rank, W world size, L ranks per node, Bg = B * W, F features of the table,
// p pooling factor, E rows, D dim, s bytes per element (data_type), r/c a shard's rows/columns.
// Ids are assumed spread over rows uniformly, so a row shard receives r/E of the table's ids.
//
// Lookup (device memory traffic / device_memory_bw): forward reads each id's row (ids * c * s)
// and writes pooled rows (bags * c * 4); the fused backward reads the output gradients, reads and
// writes each touched row and its optimizer state, and sorts the ids. data_parallel looks up the
// local batch, and its dense kernel scatters gradients into an [E, D] buffer that the dense
// optimizer then sweeps (zeroing, the update of every row, its state).
//
// Communication, counted on the receiving side (links are full duplex). Traffic exchanged among
// all W ranks is split by destination: (L-1)/W of it on the intra-node link, (W-L)/W across
// nodes; the two links run concurrently, so the slower decides:
//   table_wise / column_wise shard: receives the table's ids (input all-to-all) and, in backward,
//     the gradients of its pooled output, Bg * F * c * 4; every rank receives its pooled rows,
//     B * F * D * 4, in the forward all-to-all.
//   row_wise shard: receives its bucket of ids plus every bag's length; reduce-scatter forward and
//     all-gather backward, (W-1)/W * Bg * F * D * 4 each; with comm.hierarchical (as the
//     collection resolves it: auto is on with several nodes of several ranks) each in two steps,
//     (L-1)/L of it inside the node in f32, then 1/L of it across the nodes.
//   table_row_wise shard: ids as row_wise; intra-node reduce-scatter and all-gather,
//     (L-1)/L * Bg * F * D * 4 each, plus the cross-node exchange of Bg / L rows; every rank
//     receives its pooled rows as for table_wise.
//   Pooled rows and their gradients travel as comm.qcomms encodes them (all but the
//   hierarchical steps inside a node): 4 * D bytes a row in fp32, 2 * D in fp16 and bf16, D + 4
//   in fp8 (a scale a row).
//   data_parallel: a hierarchical all-reduce of the E * D * 4 gradient on every rank.
//   dense part: the same all-reduce of the dense parameters' gradients, 2 bytes a value with
//     comm.allreduce_precision fp16 or bf16.
//
// Tiers: fused_uvm rows (cuda) are read and written over the host link
// (host_to_device_bw) and their storage counts in DDR, not HBM. A key_value shard's misses
// per step, (1 - hit rate) x the distinct rows of its ids (the hit rate of an ideal cache of
// its slots on the synthetic data's Zipf law; for other data, measured on a sample of it
// (cache_statistics.h), else uniform ids), each read from disk
// and, being updated by the step, written back when evicted: 2 x a record rounded up to 4 KiB
// pages over disk_bw. The page cache is ignored (the store drops its pages, and a table worth a
// disk tier does not fit it anyway), so this is the miss path's cost on a cold cache.
//
// Memory per shard: rows, optimizer state (sgd none, adagrad one float per element, rowwise
// adagrad one per row, adam two per element), received ids and the pooled output and its gradient.
// data_parallel adds the dense gradient buffer. Dense: parameters, gradients, optimizer state
// and activations (twice: values and gradients).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/distributed/cache_statistics.h"
#include "engine/distributed/sharding_plan.h"
#include "engine/distributed/topology.h"
#include "engine/sparse/keyed_jagged_tensor.h"
#include "kernels/qcomm_codec.h"

namespace shardrec {

// Memory per tier (topology.h): the compute tier (HBM on cuda, DDR on cpu), DDR beside HBM on
// cuda, the disk.
struct RankCost {
    int64_t memory_bytes = 0;  // the compute tier
    int64_t host_bytes = 0;    // cuda: fused_uvm(_caching) rows and their state in DDR
    int64_t disk_bytes = 0;    // key_value rows once all are written (the stores' full size)
    double lookup_s = 0;       // embedding lookups, forward + backward with the optimizer
    double disk_s = 0;         // cache misses: rows read and written back (disk, or the host link)
    // Cache misses filled by the prefetch pipeline beside the rest of the step
    // (sharding.cache.prefetch_pipeline): the step takes the longer of the two.
    double prefetch_s = 0;
    double comm_s = 0;   // all-to-alls, reduce-scatters, all-reduces
    double dense_s = 0;  // MLPs, interaction, cross layers

    double total_s() const {
        const double step = lookup_s + disk_s + comm_s + dense_s;
        return step > prefetch_s ? step : prefetch_s;
    }

    RankCost& operator+=(const RankCost& other);
};

// The embedding traffic of one batch in one process, with the rows it touches counted from the
// batch itself rather than assumed: the bytes the lookups and the fused update cannot avoid
// moving, so a step's sparse part takes at least their sum over the device's copy bandwidth.
struct SparseTraffic {
    int64_t ids = 0;
    int64_t rows_touched = 0;  // distinct (table, row) pairs
    double lookup_bytes = 0;   // each id's row, ids and offsets read; pooled rows written
    double update_bytes = 0;   // pooled gradients, ids and offsets read; rows and state r+w once

    double total_bytes() const { return lookup_bytes + update_bytes; }
};

// What a cache holding `slots` of a table's E rows sees in a batch of `ids` ids drawn from the
// synthetic data's Zipf law (alpha; 0: uniform): the expected distinct rows, each row r there
// with probability 1 - (1 - p_r)^ids, and those of them among the `slots` most popular (an
// ideal, frequency-ordered cache's hits; LRU gets fewer). Zero and zero when slots >= rows.
struct CacheUse {
    double distinct = 0;
    double hits = 0;
};

CacheUse predicted_cache_use(int64_t rows, int64_t slots, double alpha, double ids);

// One option for one table: what each shard adds to the rank it lands on, and what every rank
// pays wherever the shards go.
struct OptionCost {
    std::vector<RankCost> shards;  // sharding_spec order; data_parallel: one per rank
    RankCost every_rank;

    // The work the option adds, summed over its shards and the world_size ranks.
    double total_s(int world_size) const;
};

class CostModel {
public:
    // stats: the cached tables' ids measured on the data (sample_cache_statistics), for their
    // miss time; null or a table without them: the synthetic data's law, or uniform ids.
    CostModel(const Config& config,
              const Topology& topology,
              const CacheStatistics* stats = nullptr);

    // The table sharded as `type` into shards of these [rows, columns] (data_parallel: ignored).
    OptionCost table_cost(const ModelConfig::Table& table,
                          ShardingType type,
                          EmbeddingComputeKernel kernel,
                          const std::vector<std::array<int64_t, 2>>& shard_sizes) const;
    OptionCost table_cost(const ModelConfig::Table& table, const ParameterSharding& ps) const;

    // What the dense part costs every rank.
    const RankCost& dense_cost() const { return dense_; }

    // The part of a [rows, cols] shard's memory that does not depend on the batch: its rows,
    // their optimizer state and, for the dense kernel, the gradient buffer. In double: a table
    // of 1e12 rows must be reported, not overflow.
    double shard_storage_bytes(const ModelConfig::Table& table,
                               EmbeddingComputeKernel kernel,
                               int64_t rows,
                               int64_t cols) const;

    const Topology& topology() const { return topology_; }

    // Dense forward FLOPs per sample and dense parameter count, from the model config.
    static double dense_flops_per_sample(const ModelConfig& model);
    static int64_t dense_parameters(const ModelConfig& model);
    // {in, out} of the dense layer with the most weights (a DCN layer counts as its [N, r]
    // projection): the GEMM shape a step's dense work is measured against.
    static std::array<int64_t, 2> largest_linear(const ModelConfig& model);
    // What the batch's features (keys: the tables' feature names) move through the model's
    // tables under config's sparse optimizer, unsharded.
    static SparseTraffic sparse_traffic(const Config& config, const KeyedJaggedTensor& features);

    // A row's record in a key_value store: the row in the table's dtype, its state, a CRC-32 and
    // a magic word, 8-byte aligned (engine/modules/key_value_store.h).
    static double record_bytes(const ModelConfig::Table& table,
                               int64_t cols,
                               const std::string& sparse_optimizer);
    // The miss time per step of a cached shard of `rows` rows receiving `ids` ids a step: key_value
    // records to and from disk, fused_uvm_caching rows over the host link.
    double miss_s(const ModelConfig::Table& table,
                  EmbeddingComputeKernel kernel,
                  double rows,
                  double cols,
                  double ids) const;

    // Optimizer state bytes per element and per row of a table under the sparse optimizer.
    static double state_bytes_per_element(const std::string& sparse_optimizer);
    static double state_bytes_per_row(const std::string& sparse_optimizer);

private:
    RankCost shard_cost(const ModelConfig::Table& table,
                        ShardingType type,
                        EmbeddingComputeKernel kernel,
                        int64_t rows,
                        int64_t cols) const;
    double a2a_s(double bytes) const;         // received volume spread over all ranks
    double all_reduce_s(double bytes) const;  // hierarchical all-reduce of `bytes` on each rank
    // comm.hierarchical's two steps for `bytes` received (f32): inside the node, then 1/L of
    // them across the nodes, as `wire` bytes (comm.qcomms applies to that step only).
    double hierarchical_s(double bytes, double wire) const;
    // `bags` pooled rows of `cols` values as comm.qcomms sends them.
    static double wire_bytes(kernels::CommType type, double bags, int64_t cols);

    Topology topology_;
    int64_t batch_size_;  // per rank
    double state_bytes_per_element_;
    double state_bytes_per_row_;
    double dense_state_factor_;
    RankCost dense_;
    std::map<std::string, double> load_factor_;  // per table: its cache's load factor
    std::set<std::string> lfu_;                  // tables whose cache is LFU (a count a row)
    bool prefetch_pipeline_ = false;             // sharding.cache.prefetch_pipeline
    std::string sparse_optimizer_;
    double zipf_alpha_ = 0;  // the ids' law for the hit rate (0: uniform)
    const CacheStatistics* stats_ = nullptr;
    kernels::CommType forward_wire_ = kernels::CommType::kFp32;  // comm.qcomms
    kernels::CommType backward_wire_ = kernels::CommType::kFp32;
    bool hierarchical_ = false;  // comm.hierarchical, resolved for row_wise
};

// Per-rank cost of a whole plan (tables plus the dense part).
struct PlanEstimate {
    std::vector<RankCost> ranks;
    int64_t memory_limit_bytes = 0;
    int64_t host_limit_bytes = 0;  // cuda: DDR for fused_uvm rows (0 on cpu)
    int64_t disk_limit_bytes = 0;  // 0: not checked

    double step_time_s() const;  // the slowest rank: collectives make every rank wait for it
    int64_t max_memory_bytes() const;
    int64_t max_host_bytes() const;
    int64_t max_disk_bytes() const;
};

PlanEstimate estimate_plan(const ShardingPlan& plan,
                           const Config& config,
                           const Topology& topology,
                           const CacheStatistics* stats = nullptr);

}  // namespace shardrec
