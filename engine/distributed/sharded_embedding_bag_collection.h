// ShardedEmbeddingBagCollection (TorchRec): an EmbeddingBagCollection whose tables are placed on
// the ranks by a ShardingPlan. Each forward runs input_dist, lookup and output_dist per sharding
// type; backward sends the gradients back through the transposed collectives and updates the
// local rows with the fused optimizer.
//   table_wise, column_wise, table_row_wise: the features travel to the ranks of their shards
//     (KJTAllToAll, TWRW ids filtered to the shard's rows), each rank pools its shards for the
//     global batch, and PooledEmbeddingsAllToAll returns the pooled columns to their samples'
//     ranks, where column shards are placed and row shards (TWRW) summed.
//   row_wise: bucketize_kjt_before_all2all + KJTAllToAll, pooled partial sums, and
//     PooledEmbeddingsReduceScatter; MEAN divides by the global bag length after the sum.
//   data_parallel: every rank holds the whole table and pools its own batch; the backward gathers
//     the ids and gradients of every rank so each replica applies the same update.
// Rows come from (seed, table, row, col), so every plan starts from the model one process builds.
// Position-weighted tables (TorchRec ShardedFeatureProcessedEmbeddingBagCollection, bucketize_pos):
// every rank holds the position weights; the ids' positions in their bags travel through the
// input dist as KJT weights and the rank of a shard turns them into weights, and sends the weight
// gradients of its shard back into the position weights, scaled by the world size where the
// backward collective divided by it. The trainer's dense all-reduce then averages them into the
// gradient one process computes.
// On a CUDA device the shards' rows and optimizer state live there and every lookup and fused
// update runs there on the caller's stream; the ids move through the input dist on the host
// (MPI) and are copied to the device per shard; the pooled results and their gradients stay on
// the device: the output dists run on device_pg (NCCL, or MPI through staging copies where ranks
// share a GPU) and the columns are placed, summed and divided by device kernels. forward's
// output and backward's gradient are on the device.
// Fused optimizers run per shard on the shard's rows and columns. SGD, Adagrad and Adam are
// element-wise, so every plan updates a row as one process does. Row-wise Adagrad keeps one
// accumulator per row of each shard, the mean of g^2 over the shard's columns (TorchRec keeps the
// state of a column-wise shard the same way): under column_wise with several shards a row's
// columns scale by different accumulators, so that combination is not invariant to the column
// split; one column shard, and every other type, is (test_sharding_invariance_exact.cpp).
// Cached tables: a key_value shard's rows live in a file under storage_dir with a DRAM cache (CPU),
// a fused_uvm_caching shard's in host memory with an HBM cache (GPU)
// (engine/modules/cached_embedding_shard.h); its lookups and updates run on the cache's slots,
// with the same numbers as rows in memory.
// 2D parallelism (TorchRec DMPCollection, sharding.replica_groups): pg is one sharding group and
// replica_pg the ranks holding the same shards in the other groups; every fused update first sums
// the touched rows' gradients over replica_pg (replica_synced_update), so the replicas stay
// bitwise identical and train as one sharding over the world. CPU only for now.
// Letters: B local batch, Bg global batch (sum over ranks), F features, D columns.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/pinned_buffer.h"
#include "engine/distributed/hierarchical_pooled.h"
#include "engine/distributed/kjt_all_to_all.h"
#include "engine/distributed/pooled_embeddings.h"
#include "engine/distributed/quantized_row_fetch.h"
#include "engine/distributed/sharding_plan.h"
#include "engine/modules/cached_embedding_shard.h"
#include "engine/modules/embedding_bag_collection_interface.h"
#include "engine/modules/embedding_config.h"
#include "engine/modules/position_weighted.h"
#include "kernels/embedding_bag.h"
#include "kernels/embedding_optimizer.h"
#include "kernels/quant_embedding_bag.h"

namespace shardrec {

// Inference (TorchRec ShardedQuantEmbeddingBagCollection): each local shard holds the rows
// `shardrec ckpt quantize` wrote, looked up by quant_embedding_bag_forward, in place of rows from
// the seed and their optimizer state; forward only, CPU. rows(table, row_offset, n) reads rows
// [row_offset, row_offset + n) of a table as stored, u8 [n * quant_row_bytes(type(table), D)].
// A quantized row's scale and bias cover all its columns, so a shard of some columns
// (column_wise) reads its rows whole and pools the columns it owns. Row-sharded tables (row_wise,
// table_row_wise) send their rows, not partial sums, to the ranks of the samples
// (QuantizedRowFetch), so that every world size and plan scores as one process does.
struct QuantizedShardRows {
    std::function<kernels::QuantType(int64_t table)> type;
    std::function<Tensor(int64_t table, int64_t row_offset, int64_t rows)> rows;

    bool enabled() const { return static_cast<bool>(rows); }
};

class ShardedEmbeddingBagCollection : public EmbeddingBagCollectionInterface {
public:
    ShardedEmbeddingBagCollection(std::vector<EmbeddingBagConfig> tables,
                                  bool is_weighted,
                                  const ShardingPlan& plan,
                                  std::shared_ptr<comm::ProcessGroup> pg,
                                  uint64_t seed,
                                  const kernels::FusedOptimizerParams& optimizer,
                                  Device device = Device::cpu(),
                                  std::shared_ptr<comm::ProcessGroup> device_pg = nullptr,
                                  QCommsConfig qcomms = {},
                                  std::string storage_dir = "",
                                  std::shared_ptr<comm::ProcessGroup> replica_pg = nullptr,
                                  HierarchicalMode hierarchical = HierarchicalMode::kOff,
                                  QuantizedShardRows quantized = {});
    ~ShardedEmbeddingBagCollection() override;

    // The bytes the pooled output dists (all-to-all, reduce-scatter, all-gather) sent from this
    // rank to the others since construction, forward and backward (comm.qcomms shrinks them).
    CommBytes pooled_comm_bytes() const;

    // The bytes the input dists' KJT all-to-alls (ids, bag lengths, weights) sent from this rank
    // to the others since construction, in `forward` (the counts of their first phase left out).
    CommBytes input_comm_bytes() const { return input_bytes_; }

    // Whether the row-sharded paths' output dists run hierarchical (comm.hierarchical).
    bool hierarchical() const { return hierarchical_on_; }

    KeyedTensor forward(const KeyedJaggedTensor& features, Stream& stream = Stream::cpu()) override;
    void backward(const Tensor& grad_values, Stream& stream = Stream::cpu()) override;

    // ---- forward in stages (TorchRec ShardedModule), for TrainPipelineSparseDist ----
    // forward() is compute_and_output_dist(input_dist(features)). The input dist only moves ids
    // and reads no row, so a pipeline may run it for batch i+1 while batch i trains: batch i+1's
    // lookups still see the rows that batch i's fused optimizer updated, and the numbers match.
    // Each stage is collective: every rank calls it in the same order as its other collectives.

    // One dist path's input dist: the all-to-all's two phases, then the KJT it received.
    struct PathInputDist {
        // The storage of the tensors this dist sends, reused by a later batch once this dist is
        // gone (first: destroyed after the awaitables, which complete the sends).
        std::shared_ptr<void> send_buffers;
        std::optional<KJTAllToAllSplitsAwaitable> splits;
        std::optional<KJTAllToAllTensorsAwaitable> tensors;
        std::optional<KeyedJaggedTensor> received;
        std::vector<int64_t> batch_size_per_rank;
    };

    // One batch's features and the input dists of the three paths, in flight or received.
    struct InputDist {
        KeyedJaggedTensor features;
        PathInputDist entries, row_wise, data_parallel;
    };

    // Starts the KJT all-to-alls of `features` (phase 1: the splits); `features` is kept.
    std::unique_ptr<InputDist> input_dist(const KeyedJaggedTensor& features);
    // Completes phase 1 and starts phase 2 (lengths, values, weights). Once only has effect.
    void input_dist_start_tensors(InputDist& dist);
    // Completes phase 2: the features every local shard looks up. Once only has effect.
    void input_dist_wait(InputDist& dist);
    // Lookups and output dist of the batch of `dist`; backward() then trains that batch.
    KeyedTensor compute_and_output_dist(std::unique_ptr<InputDist> dist, Stream& stream);
    // TorchRec PipelinedForward: the next forward() of the same feature tensors uses `dist`
    // instead of distributing them again; a forward of other features (an evaluation batch in
    // between) distributes its own and leaves `dist` queued.
    void set_pipelined_input(std::unique_ptr<InputDist> dist);

    bool has_pipelined_input() const { return pipelined_ != nullptr; }

    // ---- the prefetch pipeline (TorchRec PrefetchTrainPipelineSparseDist) ----
    // Whether some local shard is key_value or fused_uvm_caching (has a cache to fill).
    bool has_cached_shards() const;
    // Completes `dist` if needed and fills the caches with its batch's rows, on `stream` (the
    // compute stream): its lookups then use them (when `dist` is the next one computed; another
    // forward in between makes them fill again). The batch trained before must have enqueued
    // its backward.
    void prefetch(InputDist& dist, Stream& stream);
    // On another thread, while the batch of the latest prefetch() trains: fills the caches with
    // rows of `dist`'s batch (received already) ahead of its prefetch(), leaving everything that
    // training reads or writes alone (CachedEmbeddingShard::prefetch_ahead).
    void prefetch_ahead(const InputDist& dist);

    void set_learning_rate(float lr) override { optimizer_.learning_rate = lr; }

    const kernels::FusedOptimizerParams& fused_optimizer() const { return optimizer_; }

    const std::vector<std::string>& embedding_names() const override { return names_; }

    const std::vector<int64_t>& embedding_dims() const override { return dims_; }

    // Collective: the whole table `t` [E, D] f32 assembled from its shards, on every rank.
    Tensor unsharded_weight(int64_t table) const;
    // The local shards of every path; data_parallel ones are marked replicated.
    std::vector<EmbeddingShardState> shard_states() override;

    const ShardingPlan& plan() const { return plan_; }

    // key_value shards: each one's cache counters, "table@row_offset.col_offset" -> stats.
    std::vector<std::pair<std::string, CacheStats>> cache_stats() const;
    // Bytes the key_value shards of this rank hold on disk.
    int64_t storage_disk_bytes() const;
    // Host memory of the cached shards' stores: fused_uvm_caching's rows, key_value's index.
    int64_t storage_host_bytes() const;

    // Quantized shards (QuantizedShardRows): the bytes of stored rows their lookups read, and
    // the seconds those lookups took, since construction.
    int64_t quant_bytes_read() const;
    double quant_lookup_seconds() const;

    int64_t parameter_bytes() const override;  // the shards on this rank
    int64_t optimizer_state_bytes() const override;

    // The position weights, "position_weights.<feature>" (replicated on every rank).
    std::vector<Parameter*> parameters() override;

    struct ShardLookup;  // one local shard and the contiguous received keys that use it
    struct Group;        // the shards of one dist path

private:
    void build(const ShardingPlan& plan, uint64_t seed);
    QuantizedRowFetch::Table quantized_fetch_table(int64_t t,
                                                   const EmbeddingBagConfig& table,
                                                   const ParameterSharding& ps,
                                                   int me) const;
    static std::string own_storage_dir(const std::string& path);
    void warn_if_disk_short() const;
    // The sum of `bytes` over this rank's cached shards.
    int64_t sum_over_caches(int64_t (CachedEmbeddingShard::*bytes)() const) const;
    // Lookups and output dist of one path for the features its group received.
    void forward_entries(Stream& stream);
    void forward_row_wise(Stream& stream);
    void forward_data_parallel(Stream& stream);
    // The gradient columns of `keys` of `grad` into g.grad_out, divided by the bag length where
    // MEAN was applied after a row-sharded sum.
    void gather_grad(Group& g,
                     const Tensor& grad,
                     const std::vector<int64_t>& keys,
                     const std::vector<int64_t>& col_offsets,
                     const std::vector<int64_t>& widths,
                     Stream& stream);
    bool mean_after_sum(int64_t key) const;
    // Adds what the KJT all-to-alls of `dist` sent to the other ranks to input_bytes_.
    void count_input_bytes(const InputDist& dist);
    // The bag length of each sample for the MEAN-after-sum keys of `kjt` (1 for an empty bag,
    // whose sum is 0), into mean_lengths_ on the device, in the stream's order.
    void make_mean_lengths(const KeyedJaggedTensor& kjt, Stream& stream);
    // mean_lengths_'s row for output key k (a MEAN-after-sum key).
    Tensor mean_lengths(int64_t key) const;

    std::vector<EmbeddingBagConfig> tables_;
    bool is_weighted_;
    std::unique_ptr<PositionWeightedModule> position_weighted_;
    Tensor positions_buffer_;  // input_dist: the weights of the KJT with positions
    KJTBufferPool permuted_;   // input_dist: the row-wise and data-parallel keys of a batch
    Device device_;
    ShardingPlan plan_;
    std::shared_ptr<comm::ProcessGroup> pg_;         // host tensors: the ids and their metadata
    std::shared_ptr<comm::ProcessGroup> device_pg_;  // device_'s tensors: the output dists
    QCommsConfig qcomms_;                            // the output dists' precision
    // 2D parallelism: the ranks that hold the same shards in the other sharding groups (nullptr:
    // none); pg_ is then this rank's sharding group.
    std::shared_ptr<comm::ProcessGroup> replica_pg_;
    HierarchicalMode hierarchical_;  // comm.hierarchical
    bool hierarchical_on_ = false;   // resolved in build()
    kernels::FusedOptimizerParams optimizer_;
    std::vector<std::string> names_;        // output keys: table order, then feature order
    std::vector<int64_t> dims_;             // per output key
    std::vector<int64_t> key_col_;          // first column of each output key
    std::vector<int64_t> key_table_;        // table of each output key
    std::vector<bool> row_sharded_;         // key pooled from row shards (row_wise, table_row_wise)
    std::unique_ptr<Group> entries_;        // table_wise, column_wise, table_row_wise
    std::unique_ptr<Group> row_wise_;       // row_wise
    std::unique_ptr<Group> data_parallel_;  // data_parallel
    Tensor out_;                            // [B, sum D] on device_
    std::vector<int64_t> mean_keys_;        // the output keys with MEAN after a row-sharded sum
    Tensor mean_lengths_host_,
        mean_lengths_;         // [mean_keys_ * B] bag lengths, 0 as 1 (host, device_)
    Tensor mean_lengths_buf_;  // grow-only storage of mean_lengths_ on a CUDA device
    std::optional<HostToDeviceStager> mean_stager_;
    std::unique_ptr<InputDist> pipelined_;          // set_pipelined_input
    const InputDist* prefetched_ = nullptr;         // the dist of the latest prefetch()
    std::string storage_dir_;                       // key_value shards' files (own_storage_dir)
    QuantizedShardRows quantized_;                  // inference: the quantized rows of the shards
    std::unique_ptr<QuantizedRowFetch> row_fetch_;  // inference: the row-sharded tables
    CommBytes input_bytes_;                         // input_comm_bytes()
};

}  // namespace shardrec
