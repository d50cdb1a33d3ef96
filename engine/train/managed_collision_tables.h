// The managed-collision tables of a run (model.tables[].managed_collision): one TorchRec
// MCHManagedCollisionModule per such table, between the data and the embedding lookup. A training
// batch's raw ids of every feature of the table go through the module's forward (one step per
// batch), the rows whose slot changed owner at an eviction get their initial values back and
// their fused optimizer state zeroed; evaluation remaps read-only. With several ranks the remap
// state is replicated: every rank runs each step on the ids of the global batch (all ranks' ids of
// the managed tables gathered in the order one process reads them), so the slots are those of one
// process fed the global batch, for any world size and plan; each rank keeps the rows of its own
// ids and resets the evicted rows of the shards it holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/config/config.h"
#include "engine/distributed/kjt_all_gather.h"
#include "engine/modules/embedding_bag_collection_interface.h"
#include "engine/modules/managed_collision.h"
#include "engine/sparse/batch.h"

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

// The options of table `t`'s module (the config is checked already).
ManagedCollisionOptions managed_collision_options(const ModelConfig::Table& t, uint64_t seed);

class ManagedCollisionTables {
public:
    // The tables of `model` with managed_collision.zch_size > 0; seed: train.seed (the initial
    // values of reset rows, as the tables', and the probabilistic admission). pg: the ranks whose
    // batches make the global batch (null: one process).
    ManagedCollisionTables(const ModelConfig& model,
                           uint64_t seed,
                           std::shared_ptr<comm::ProcessGroup> pg = nullptr);

    bool empty() const { return tables_.empty(); }

    // A training batch: its ids of the managed tables remapped to rows (the other features as
    // they are), after each module's step; rows evicted in this step are reset in `sparse`, once
    // `stream` (the one the steps before were enqueued on) has passed them. The remap runs on
    // the host for every device, as the ids arrive there. Collective over pg (every rank calls
    // it once per training step).
    Batch remap_train(const Batch& batch, EmbeddingBagCollectionInterface& sparse, Stream& stream);
    // Evaluation and prediction: the same remap without counting or evicting.
    Batch remap_eval(const Batch& batch) const;

    // Records of the eviction passes since the last call.
    std::vector<ManagedCollisionRecord> take_records() { return std::move(records_); }

    size_t size() const { return tables_.size(); }

    const std::string& table_name(size_t i) const { return tables_[i].name; }

    const MCHManagedCollisionModule& module(size_t i) const { return *tables_[i].module; }

    // The module's state as one i64 tensor (checkpoints), and back (throws when it does not fit).
    Tensor state_tensor(size_t i) const;
    void load_state_tensor(size_t i, const Tensor& t, const std::string& where);

    // The map a saved state holds: i64 [slots, 2], one (raw id, row) per occupied slot, rows in
    // slot order (slot s is row s of the table). For `ckpt export`; `where` names the file.
    static Tensor id_to_row(const Tensor& state, const std::string& where);

private:
    struct Table {
        std::string name;
        int64_t index = 0;  // among model.tables (the init's table_index)
        int64_t num_embeddings = 0;
        std::vector<std::string> features;
        std::unique_ptr<MCHManagedCollisionModule> module;
        int64_t evictions_seen = 0, admissions_seen = 0;  // at the last record
        int64_t ids_seen = 0, hits_seen = 0;              // since the last record
    };

    void reset_rows(const Table& t,
                    const std::vector<int64_t>& rows,
                    EmbeddingBagCollectionInterface& sparse,
                    Stream& stream) const;

    uint64_t seed_;
    std::shared_ptr<comm::ProcessGroup> pg_;
    std::vector<Table> tables_;
    std::vector<ManagedCollisionRecord> records_;
    std::vector<int64_t> ids_, rows_;  // scratch
    KJTAllGatherBuffers gather_;
};

}  // namespace shardrec::train
