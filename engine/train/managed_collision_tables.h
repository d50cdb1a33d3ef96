// The managed-collision tables of a run (model.tables[].managed_collision): per such table,
// total_num_buckets TorchRec MCHManagedCollisionModules, between the data and the embedding
// lookup. A raw id belongs to one bucket (managed_collision_bucket: a hash of the id), bucket b
// maps its ids to rows [b * R / K, (b + 1) * R / K) of the table's R rows. A training batch's
// raw ids of every feature of the table go through their bucket's forward (every bucket steps once
// per batch), the rows whose slot changed owner at an eviction get their initial values back and
// their fused optimizer state zeroed; evaluation remaps read-only.
//
// With several ranks a bucket's state lives on one rank, its owner: the rank holding the bucket's
// first row in the sharding plan (bucket_owner, sharding_plan.h), so with K a multiple of the ranks
// a row_wise table's remap state is split as its rows are. Each rank sends each raw id to its
// bucket's owner (an all-to-all), the owner remaps the ids of all ranks and sends the rows back; at
// an eviction step the evicted rows and the records' counts are gathered, so every rank resets the
// rows of the shards it holds. A bucket's module sees the same ids every step for any world size
// and plan (the bucket depends on the id alone, the module's decisions on the multiset of its ids),
// so the slots are those of one process fed the global batch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/process_group.h"
#include "engine/config/config.h"
#include "engine/distributed/sharding_plan.h"
#include "engine/modules/embedding_bag_collection_interface.h"
#include "engine/modules/managed_collision.h"
#include "engine/sparse/batch.h"
#include "engine/sparse/keyed_jagged_tensor.h"

namespace shardrec::train {

// One eviction interval of one table, for metrics.jsonl.
struct ManagedCollisionRecord {
    std::string table;
    int64_t step = 0;       // the module's step of the eviction pass (1-based train step)
    int64_t occupancy = 0;  // slots that hold an id
    int64_t slots = 0;      // slots ids can own
    int64_t evictions = 0;  // over the interval
    int64_t admissions = 0;
    // Of the interval's ids (every feature of the table, the global batch), the fraction whose
    // row is their own slot (not the residual rows or the fallback slot); 0 without ids.
    double hit_fraction = 0;
};

// The rows of a training batch's remap evicted (every rank's, ascending), by managed table.
struct ManagedCollisionEvictions {
    std::vector<std::pair<size_t, std::vector<int64_t>>> tables;  // (index of the table, rows)

    bool empty() const { return tables.empty(); }
};

// The options of table `t`'s module (the config is checked already): bucket `bucket` of its
// total_num_buckets, with that bucket's share of the slots and residual rows and its first row as
// output_global_offset.
ManagedCollisionOptions managed_collision_options(const ModelConfig::Table& t,
                                                  uint64_t seed,
                                                  int64_t bucket = 0);

class ManagedCollisionTables {
public:
    // The tables of `model` with managed_collision.zch_size > 0; seed: train.seed (the initial
    // values of reset rows, as the tables', and the probabilistic admission). pg: the ranks whose
    // batches make the global batch (null: one process, which keeps every bucket). plan: the
    // tables' sharding over the first ranks of pg (2D parallelism: the first sharding group),
    // which places the buckets (null: rank 0 keeps them all).
    ManagedCollisionTables(const ModelConfig& model,
                           uint64_t seed,
                           std::shared_ptr<comm::ProcessGroup> pg = nullptr,
                           const ShardingPlan* plan = nullptr);

    bool empty() const { return tables_.empty(); }

    // A training batch: its ids of the managed tables remapped to rows (the other features as
    // they are), after each bucket's step; the rows evicted in this step, every rank's, go to
    // `evicted`, to reset with reset_evicted() once every earlier step has updated the tables and
    // before this batch's lookups (the remap's decisions depend on the ids alone, so a pipeline
    // may remap a batch while the one before still trains). The remap runs on the host for every
    // device, as the ids arrive there. Collective over pg (every rank calls it once per training
    // step).
    Batch remap_train(const Batch& batch, ManagedCollisionEvictions* evicted);
    // Their initial values back to the rows evicted, and their fused optimizer state to zero, in
    // the shards of `sparse` this rank holds, once `stream` (the one the steps before were
    // enqueued on) has passed them.
    void reset_evicted(const ManagedCollisionEvictions& evicted,
                       EmbeddingBagCollectionInterface& sparse,
                       Stream& stream);
    // Both at once, for a caller that trains each batch before it remaps the next.
    Batch remap_train(const Batch& batch, EmbeddingBagCollectionInterface& sparse, Stream& stream);
    // Evaluation and prediction: the same remap without counting or evicting (collective). Not
    // const: it reuses its buffers (one caller at a time).
    Batch remap_eval(const Batch& batch);

    // Records of the eviction passes since the last call.
    std::vector<ManagedCollisionRecord> take_records() { return std::move(records_); }

    size_t size() const { return tables_.size(); }

    const std::string& table_name(size_t i) const { return tables_[i].name; }

    // Whether the model's table `name` is managed (has a remap).
    bool manages(const std::string& name) const {
        return std::any_of(tables_.begin(), tables_.end(),
                           [&](const Table& t) { return t.name == name; });
    }

    int64_t num_buckets(size_t i) const { return static_cast<int64_t>(tables_[i].owner.size()); }

    // Whether this rank keeps the state of table i's bucket b.
    bool owns(size_t i, int64_t bucket) const;

    // An owned bucket's module.
    const MCHManagedCollisionModule& module(size_t i, int64_t bucket = 0) const;

    // An owned bucket's state as one i64 tensor (checkpoints), and back (throws when it does not
    // fit). After loading its owned buckets every rank calls loaded() (collective over pg).
    Tensor state_tensor(size_t i, int64_t bucket) const;
    void load_state_tensor(size_t i, int64_t bucket, const Tensor& t, const std::string& where);
    void loaded();

    // The map a saved bucket state holds: i64 [slots, 2], one (raw id, row) per occupied slot,
    // rows first_row + slot in slot order. For `ckpt export`; `where` names the file.
    static Tensor id_to_row(const Tensor& state, int64_t first_row, const std::string& where);

private:
    struct Table {
        std::string name;
        int64_t index = 0;  // among model.tables (the init's table_index)
        int64_t num_embeddings = 0;
        int64_t eviction_interval = 1;
        int64_t step = 0;  // training steps taken (every bucket steps with each)
        std::vector<std::string> features;
        std::vector<int> owner;  // [buckets]: the rank that keeps the bucket
        std::vector<std::unique_ptr<MCHManagedCollisionModule>> modules;  // [buckets], owned only
        uint64_t input_hash_size = 0;

        // Of each owned bucket since the last record (the buckets step on threads of their own).
        struct Seen {
            int64_t ids = 0, hits = 0;
            std::vector<int64_t> evicted;
        };

        std::vector<Seen> seen;  // [buckets]
        // Of the owned buckets: totals at the last record.
        int64_t evictions_seen = 0, admissions_seen = 0;
    };

    // The route's per-batch tensors, grow-only, so that a step allocates none once the batch
    // sizes have been seen: the remapped values go out with the batch, so each of those is reused
    // only once no batch holds it (pipelines keep several); the others live within one route.
    struct RouteBuffers {
        KJTBufferPool values;
        Tensor send_counts, recv_counts, send_ids, recv_ids, rows, back;

        // An id of a table of several buckets: its value in the KJT, and its cell (owner rank *
        // buckets + the bucket's), then its place in send_ids.
        struct Single {
            int64_t at, cell;
        };

        std::vector<Single> singles;
        // The ids binned for the modules: a table's in one process, an owned bucket's with several.
        std::vector<ManagedCollisionBins> bins;
    };

    // Maps the managed features' ids of `batch` through map(table, bucket, ids, rows) (ids: a
    // ManagedCollisionIds, each id's row going to rows[at]), called on the bucket's owner for every
    // owned bucket (with or without ids), the owned buckets on the CPU threads at once.
    template <typename Tables, typename Map>
    static Batch route(const Batch& batch,
                       comm::ProcessGroup* pg,
                       Tables& tables,
                       RouteBuffers& buffers,
                       Map&& map);

    void record(ManagedCollisionEvictions* evicted);
    void reset_rows(const Table& t,
                    const std::vector<int64_t>& rows,
                    EmbeddingBagCollectionInterface& sparse,
                    Stream& stream);

    uint64_t seed_;
    std::shared_ptr<comm::ProcessGroup> pg_;
    int rank_ = 0;
    std::vector<Table> tables_;
    std::vector<ManagedCollisionRecord> records_;
    RouteBuffers train_buffers_, eval_buffers_;

    // record's all-gathers (this rank's size and part, every rank's), grow-only.
    struct RecordBuffers {
        Tensor size, sizes, mine, all;
    };

    RecordBuffers record_buffers_;
    Tensor reset_rows_, reset_rows_device_;  // the rows reset_rows resets, grow-only
};

}  // namespace shardrec::train
