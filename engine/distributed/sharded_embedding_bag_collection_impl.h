// The private parts of ShardedEmbeddingBagCollection that its two source files share: a shard's
// lookup state and a dist path's group. Not for other code.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/core/pinned_buffer.h"
#include "engine/distributed/bucketize.h"
#include "engine/distributed/kjt_all_gather.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/modules/cached_embedding_shard.h"
#include "kernels/embedding_bag.h"

namespace shardrec {

// One feature slot of the entries path: output key `key` looked up in the shard
// [row_offset, +rows) x [col_offset, +cols) of `table`, which lives on rank `dest`.
struct Entry {
    int64_t key = 0;
    int64_t table = 0;
    int64_t shard = 0;
    int64_t row_offset = 0, rows = 0, col_offset = 0, cols = 0;
    int dest = 0;
    bool row_sharded = false;  // ids are filtered to the shard's rows, pooled as SUM
};

struct ShardedEmbeddingBagCollection::ShardLookup {
    int64_t table = 0;
    int64_t row_offset = 0, rows = 0, col_offset = 0, cols = 0;
    PoolingMode mode = PoolingMode::kSum;
    int64_t first_key = 0, num_keys = 0;  // contiguous keys of the received KJT
    // [rows, cols] and optimizer state; a cached shard: its cache's slots, {0, capacity}.
    Tensor weights, state1, state2;
    // Inference (QuantizedShardRows): the shard's rows as quantized, u8 [rows * row bytes], in
    // place of weights and state, whole rows also for a column shard (the table's dim in
    // quant_dims), and the one-table arguments of quant_embedding_bag_forward; a column shard
    // pools its rows whole into quant_pooled [batch, num_keys * dim] and keeps its columns.
    Tensor quant_rows, quant_offsets, quant_types, quant_dims, quant_pooled;
    int64_t quant_bytes = 0;   // stored row bytes the lookups read
    double quant_seconds = 0;  // and their time
    Tensor table_offsets;      // [2] i64: {0, rows}
    // key_value: the rows on disk and their cache; the kernels see the cache slots, and the
    // bags' ids translated into them (slot_ids).
    std::unique_ptr<CachedEmbeddingShard> cached;
    Tensor slot_ids;
    bool prefetched = false;  // slot_ids already hold the next lookup's (prefetch())
    Tensor feature_table;     // [num_keys] i32 zeros
    kernels::EmbeddingBackwardWorkspace workspace;
    Tensor ids, offsets, psw;  // the latest forward's bags of this shard (host)
    // What the kernels read: ids, offsets, psw themselves on the cpu, their copies on a CUDA
    // device (grow-only storage *_buf, through the pinned staging of `stager`).
    Tensor k_ids, k_offsets, k_psw, k_ids_buf, k_offsets_buf, k_psw_buf;
    std::optional<HostToDeviceStager> stager;
    // Position-weighted shards: the position weights of each key (-1: none), the positions the
    // KJT brought (psw then holds their weights), and d loss / d psw.
    std::vector<int64_t> position_weights;
    Tensor positions, psw_buf, grad_psw_buf, grad_psw_host_buf;
    Tensor offsets_buf;  // grow-only storage of offsets (batch sizes differ in backward)
    Tensor out, grad;    // [batch, num_keys * cols] on the collection's device
    int64_t step = 1;
};

// Grow-only send tensors of one entries-path input dist.
struct SendBuffers {
    Tensor lengths, values, weights;
};

struct ShardedEmbeddingBagCollection::Group {
    std::vector<Entry> entries;      // entries path, in send order (by destination rank)
    std::vector<int64_t> keys;       // row_wise / data_parallel: output keys, in group order
    std::vector<ShardLookup> local;  // this rank's shards, in received key order
    std::unique_ptr<KJTAllToAll> a2a;
    std::unique_ptr<PooledEmbeddingsAllToAll> pooled_a2a;
    std::unique_ptr<PooledEmbeddingsReduceScatter> reduce_scatter;
    std::unique_ptr<PooledEmbeddingsAllGather> all_gather;
    // comm.hierarchical: in place of pooled_a2a / reduce_scatter (hierarchical_pooled.h).
    std::unique_ptr<HierarchicalPooledAllToAll> hier_a2a;
    std::unique_ptr<HierarchicalReduceScatter> hier_reduce_scatter;
    KeyedJaggedTensor received;  // my keys for the batch the lookups ran on
    std::vector<int64_t> batch_size_per_rank;
    Tensor local_out;            // [batch, sum local cols]
    Tensor grad_out;             // [B, sum group cols]
    KJTAllGatherBuffers gather;  // data_parallel backward: every rank's KJT
    // entries path: send buffer sets; one only this vector holds is free (the pipeline keeps
    // more than one input dist alive).
    std::vector<std::shared_ptr<SendBuffers>> send_pool;
    std::vector<std::shared_ptr<BucketizeBuffers>> bucketize_pool;  // row_wise, the same way
    int64_t cols = 0;  // sum of the group's output columns
};

}  // namespace shardrec
