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
// Letters: B local batch, Bg global batch (sum over ranks), F features, D columns.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/distributed/kjt_all_to_all.h"
#include "engine/distributed/pooled_embeddings.h"
#include "engine/distributed/sharding_plan.h"
#include "engine/modules/embedding_bag_collection_interface.h"
#include "engine/modules/embedding_config.h"
#include "kernels/embedding_bag.h"
#include "kernels/embedding_optimizer.h"

namespace shardrec {

class ShardedEmbeddingBagCollection : public EmbeddingBagCollectionInterface {
public:
    ShardedEmbeddingBagCollection(std::vector<EmbeddingBagConfig> tables,
                                  bool is_weighted,
                                  const ShardingPlan& plan,
                                  std::shared_ptr<comm::ProcessGroup> pg,
                                  uint64_t seed,
                                  const kernels::FusedOptimizerParams& optimizer);
    ~ShardedEmbeddingBagCollection() override;

    KeyedTensor forward(const KeyedJaggedTensor& features, Stream& stream = Stream::cpu()) override;
    void backward(const Tensor& grad_values, Stream& stream = Stream::cpu()) override;

    void set_learning_rate(float lr) override { optimizer_.learning_rate = lr; }

    const kernels::FusedOptimizerParams& fused_optimizer() const { return optimizer_; }

    const std::vector<std::string>& embedding_names() const override { return names_; }

    const std::vector<int64_t>& embedding_dims() const override { return dims_; }

    // Collective: the whole table `t` [E, D] f32 assembled from its shards, on every rank.
    Tensor unsharded_weight(int64_t table) const;
    int64_t parameter_bytes() const override;  // the shards on this rank
    int64_t optimizer_state_bytes() const override;

    struct ShardLookup;  // one local shard and the contiguous received keys that use it
    struct Group;        // the shards of one dist path

private:
    void build(const ShardingPlan& plan, uint64_t seed);
    void forward_entries(const KeyedJaggedTensor& kjt, Stream& stream);
    void forward_row_wise(const KeyedJaggedTensor& kjt, Stream& stream);
    void forward_data_parallel(const KeyedJaggedTensor& kjt, Stream& stream);
    // The gradient columns of `keys` of `grad` into g.grad_out, divided by the bag length where
    // MEAN was applied after a row-sharded sum.
    void gather_grad(Group& g,
                     const Tensor& grad,
                     const std::vector<int64_t>& keys,
                     const std::vector<int64_t>& col_offsets,
                     const std::vector<int64_t>& widths);
    bool mean_after_sum(int64_t key) const;

    std::vector<EmbeddingBagConfig> tables_;
    bool is_weighted_;
    std::shared_ptr<comm::ProcessGroup> pg_;
    kernels::FusedOptimizerParams optimizer_;
    std::vector<std::string> names_;        // output keys: table order, then feature order
    std::vector<int64_t> dims_;             // per output key
    std::vector<int64_t> key_col_;          // first column of each output key
    std::vector<int64_t> key_table_;        // table of each output key
    std::vector<bool> row_sharded_;         // key pooled from row shards (row_wise, table_row_wise)
    std::unique_ptr<Group> entries_;        // table_wise, column_wise, table_row_wise
    std::unique_ptr<Group> row_wise_;       // row_wise
    std::unique_ptr<Group> data_parallel_;  // data_parallel
    Tensor out_;                            // [B, sum D]
    Tensor local_lengths_;                  // [F_out * B] bag lengths of the latest forward (MEAN)
};

}  // namespace shardrec
