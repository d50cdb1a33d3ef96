// ShardedEmbeddingCollection (TorchRec): an EmbeddingCollection (sequence embeddings, one row per
// id, no pooling) whose tables are placed on the ranks by a ShardingPlan (TorchRec
// EmbeddingCollectionSharder's types). Each forward runs input_dist, lookup and output_dist per
// dist path; backward sends the gradient rows back through the transposed collectives and updates
// the local rows with the fused optimizer.
//   table_wise, column_wise: the features travel to the ranks of their shards (KJTAllToAll, one
//     key per feature and shard), each rank looks up its shards for the global batch, and
//     SequenceEmbeddingsAllToAll returns every id's row to the rank and position it came from,
//     where column shards are placed at their column offsets. Shards are grouped by width (the
//     sequence all-to-all moves one width), one path per width, so table_wise tables and column
//     shards of any widths, even or not, each travel in their own all-to-all.
//   row_wise: bucketize_kjt_before_all2all + KJTAllToAll, the lookup of each rank's row block,
//     and SequenceEmbeddingsAllToAll with unbucketize_permute back to the original id order.
//   data_parallel: every rank holds the whole table and looks up its own batch (no all-to-all);
//     the backward gathers the ids and gradient rows of every rank (all_gather_kjt) so each
//     replica applies the same update, that of the global batch.
//   table_row_wise is refused with an Error naming the table (TorchRec's sharder refuses it too).
// Without pooling every output row is one table row, so every plan gives bitwise the rows one
// process gives. Backward aggregates each shard's duplicate ids in the order one process sees them
// (feature, then the global sample order: rank 0's samples first), so SGD, Adagrad and Adam
// updates match one process bitwise; row-wise Adagrad keeps one accumulator per row of each shard
// (as the bag collection), which under column_wise with several shards differs from one process.
// The sequence all-to-all's backward, and data_parallel's gathered gradient, divide by the world
// size when gradient_division() is on (TorchRec All2All_Seq).
// Rows come from (seed, table, row, col), so every plan starts from the model one process builds.
// Letters: B local batch, F features, D embedding dim (shared by all tables), N ids.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/process_group.h"
#include "engine/distributed/sharding_plan.h"
#include "engine/modules/embedding_bag_collection_interface.h"
#include "engine/modules/embedding_config.h"
#include "engine/sparse/jagged_tensor.h"
#include "engine/sparse/keyed_jagged_tensor.h"
#include "kernels/embedding_optimizer.h"

namespace shardrec {

class ShardedEmbeddingCollection {
public:
    // tables: as EmbeddingCollection (one embedding_dim and data_type). Every table needs a
    // data_parallel, table_wise, column_wise or row_wise entry in `plan`.
    ShardedEmbeddingCollection(std::vector<EmbeddingConfig> tables,
                               const ShardingPlan& plan,
                               std::shared_ptr<comm::ProcessGroup> pg,
                               uint64_t seed,
                               const kernels::FusedOptimizerParams& optimizer);
    ~ShardedEmbeddingCollection();
    ShardedEmbeddingCollection(const ShardedEmbeddingCollection&) = delete;
    ShardedEmbeddingCollection& operator=(const ShardedEmbeddingCollection&) = delete;

    // Collective. As EmbeddingCollection::forward for this rank's batch: feature -> JaggedTensor
    // in embedding_names() order, values [L_f, D] f32 views into a buffer the next forward reuses.
    std::vector<std::pair<std::string, JaggedTensor>> forward(const KeyedJaggedTensor& features,
                                                              Stream& stream = Stream::cpu());

    // Collective. As EmbeddingCollection::backward: one [L_f, D] f32 per feature, by name.
    void backward(const std::vector<std::pair<std::string, Tensor>>& grads,
                  Stream& stream = Stream::cpu());

    const std::vector<std::string>& embedding_names() const { return names_; }

    int64_t embedding_dim() const { return dim_; }

    void set_learning_rate(float lr) { optimizer_.learning_rate = lr; }

    const kernels::FusedOptimizerParams& fused_optimizer() const { return optimizer_; }

    // Collective: the whole table `t` [E, D] f32 assembled from its shards, on every rank.
    Tensor unsharded_weight(int64_t table) const;
    // The local shards of every path (views); data_parallel ones are marked replicated.
    std::vector<EmbeddingShardState> shard_states();

    int64_t parameter_bytes() const;  // the shards on this rank, replicas included
    int64_t optimizer_state_bytes() const;

    struct Shard;  // one local shard and the contiguous received keys that use it
    struct Path;   // one dist: the shards of one width, the row-wise or the data-parallel features

private:
    void build(const ShardingPlan& plan, uint64_t seed);
    // input_dist: starts and completes every path's KJTAllToAll.
    void input_dist(const KeyedJaggedTensor& features);
    // lookup + output_dist of one path; places the rows into out_.
    void lookup_and_output_dist(Path& p, Stream& stream);
    // Gathers every rank's ids and gradient rows of the data-parallel path, then updates.
    void backward_data_parallel(Path& p, Stream& stream);

    std::vector<EmbeddingConfig> tables_;
    std::shared_ptr<comm::ProcessGroup> pg_;
    kernels::FusedOptimizerParams optimizer_;
    int64_t dim_ = 0;
    std::vector<std::string> names_;  // table order, then feature order
    std::vector<int64_t> key_table_;  // table of each output key
    std::vector<std::unique_ptr<Path>> paths_;
    // The latest forward: rows [N, D] in names_ order, each key's first row and id count.
    Tensor out_;
    std::vector<int64_t> key_row_, key_count_;
};

}  // namespace shardrec
