// What a model needs from its sparse arch, whether the tables live in this process
// (EmbeddingBagCollection) or are sharded over the ranks (ShardedEmbeddingBagCollection).
// TorchRec: EmbeddingBagCollectionInterface.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/stream.h"
#include "engine/modules/cached_embedding_shard.h"
#include "engine/modules/module.h"
#include "engine/sparse/keyed_jagged_tensor.h"
#include "engine/sparse/keyed_tensor.h"

namespace shardrec {

// One table shard held by this process, for checkpoints (TorchRec: a ShardedTensor's local shard
// with its ShardMetadata, and the fused optimizer's state of it). The tensors are views: writing
// into them changes the model.
struct EmbeddingShardState {
    int64_t table = 0;  // index into the collection's tables
    int64_t row_offset = 0, rows = 0, col_offset = 0, cols = 0;  // place in the [E, D] table
    // data_parallel: every rank holds the same whole table; a sharding group after the first
    // (sharding.replica_groups): a copy of the first group's shard. Checkpoints write it once.
    bool replicated = false;
    // A key_value shard: its rows are read and written through `cached` (flush it first), and
    // weight and optimizer_state are undefined.
    CachedEmbeddingShard* cached = nullptr;
    Tensor weight;  // [rows, cols], the table's dtype
    // As kernels/embedding_optimizer.h: none (sgd), {G [rows, cols]} (adagrad), {G [rows]}
    // (row-wise adagrad: per row of this shard's columns), {m, v [rows, cols]} (adam). f32.
    std::vector<Tensor> optimizer_state;
    // The 1-based step of the shard's next fused update (Adam's bias correction); nullptr in
    // dense mode. Shards may share one counter.
    int64_t* optimizer_step = nullptr;
};

class EmbeddingBagCollectionInterface : public Module {
public:
    // Pooled embeddings [B, sum D] for the features of the KJT (this rank's batch), keys
    // embedding_names(). The values are reused by the next forward (copy them to keep them).
    virtual KeyedTensor forward(const KeyedJaggedTensor& features, Stream& stream) = 0;
    // grad_values [B, sum D] of the latest forward: updates the rows through the fused optimizer.
    virtual void backward(const Tensor& grad_values, Stream& stream) = 0;
    virtual void set_learning_rate(float lr) = 0;
    virtual const std::vector<std::string>& embedding_names() const = 0;
    virtual const std::vector<int64_t>& embedding_dims() const = 0;
    // Bytes of the rows and of the fused optimizer state held by this process.
    virtual int64_t parameter_bytes() const = 0;
    virtual int64_t optimizer_state_bytes() const = 0;
    // This process's table shards, in a fixed order (checkpoint save and load).
    virtual std::vector<EmbeddingShardState> shard_states() = 0;
};

}  // namespace shardrec
