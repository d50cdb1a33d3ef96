// Sharded, atomic, checksummed checkpoints of a Trainer, loadable under another world size or
// plan (TorchRec: the sharded state_dict with ShardMetadata, plus the fused optimizer's state).
//
// Save (collective): every rank writes its own table shards and their fused optimizer state,
// rank 0 the replicated (data_parallel) tables, the dense parameters, the dense optimizer state
// and manifest.yaml (checkpoint_manifest.h: model signature, shard placement, every file with its
// size and CRC-32). Files go into <parent>/.tmp-step-<N>; rank 0 renames it to <parent>/step-<N>
// only once every rank has written and checked its files, then keeps the newest `keep` of this
// run's checkpoints (same run id; another run's are never removed). Every file and directory is
// fsync'ed before the rename that publishes it, and the manifest ends with its own CRC-32. A
// failure on any rank fails every rank with that rank's message and leaves only the .tmp-
// directory, which --resume never picks (the next save of that step replaces it). The ranks must
// share the file system.
//
// Load (collective): the manifest's model signature must match the trainer's (tables, dims,
// dtypes, dense layer shapes, optimizer types; a mismatch is named). Every file's size and CRC-32
// is checked, the files split over the ranks. Each local shard then reads only the rows and
// columns it overlaps in the saved shards, so a checkpoint written by W ranks under one plan
// loads under W' ranks and another plan, optimizer state included. A managed-collision table's
// remap (slots, counts, the interval's ids, pending resets) is saved and loaded exactly, a file
// per bucket from the rank that keeps it, read by the rank that keeps it under the new plan.
//   rowwise_adagrad under column_wise: the state is one value per row of each column shard
//   (TorchRec: the mean of g^2 over the shard's columns). A shard loading columns from several
//   saved shards takes their mean weighted by the columns each contributes: exact when the new
//   shard is a union of saved ones (column_wise -> table_wise), and when a saved shard is split
//   (table_wise -> column_wise) every part starts from the whole row's mean (the per-column values
//   were never stored), so that continuation differs from the original plan's as plans do.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/train/checkpoint_manifest.h"

namespace shardrec::train {

class Trainer;

// The remap state of one bucket of a managed-collision table (ManagedCollisionTables::
// state_tensor, i64), a file of the checkpoint's list, written by the rank that keeps the bucket.
inline std::string managed_collision_file(const std::string& table, int64_t bucket) {
    return "managed_collision/" + table + "." + std::to_string(bucket) + ".bin";
}

// Writes the state of `trainer` after `step` completed steps to <parent>/step-<step> (zero-padded
// to 8 digits) and keeps the newest `keep` checkpoints of trainer.run_id() there (0: all).
// Returns the directory.
std::string save_checkpoint(Trainer& trainer,
                            const std::string& parent,
                            int64_t step,
                            int64_t keep);

struct LoadOptions {
    // Resuming training: train.seed must match (the data stream depends on it), and the trainer
    // continues the data from the checkpoint's sample position (Trainer::set_data_position).
    bool resume = false;
    // Where to write the checkpoint taken (a directory of them names one), when not null.
    std::string* taken = nullptr;
};

// Loads a checkpoint into `trainer` (built from a config of the same model; any world size and
// plan). `dir`: a checkpoint, or a directory of them: the newest intact one is taken, and a newer
// one whose manifest or files are damaged is skipped with a warning that says why. Returns the
// checkpoint's step: the number of completed steps.
int64_t load_checkpoint(Trainer& trainer, const std::string& dir, const LoadOptions& options = {});

// The checkpoints `dir` names, newest first: itself when it holds manifest.yaml, else its
// step-<N> subdirectories with a manifest (.tmp- directories are never complete). Throws when
// there is none.
std::vector<std::string> checkpoint_candidates(const std::string& dir);

// Whether `dir` is a checkpoint or a directory holding a complete one.
bool has_checkpoint(const std::string& dir);

// checkpoint_candidates(dir).front().
std::string resolve_checkpoint(const std::string& dir);

// The run id of the newest readable checkpoint `dir` names; "" when none (or it has none).
std::string checkpoint_run_id(const std::string& dir);

// The manifest of `trainer` without shards and files: its model signature (tables, dense
// parameters, optimizer types) and run facts (seed, world size, global batch).
CheckpointManifest describe_trainer(Trainer& trainer, int64_t step);

// Checks the size and CRC-32 of the manifest's files; only files i with i % world == rank (so
// the ranks share the reading). Returns the first problem ("" when none), naming the file and the
// expected and actual values.
std::string verify_checkpoint_files(const std::string& dir,
                                    const CheckpointManifest& manifest,
                                    int rank = 0,
                                    int world_size = 1);

// Reads rows [row_offset, +rows) x columns [col_offset, +cols) of the unsharded table `table`
// from the saved shards into `out`: the weight (state -1, out [rows, cols] of the table's dtype)
// or sparse state `state` (index into manifest.sparse_state; out [rows, cols] f32, or [rows] f32
// for rowwise_adagrad: the column-weighted mean of the saved shards', see above). Reads only the
// overlapping parts. Throws when the saved shards do not cover the region. Sets *optimizer_step
// to the saved shards' step when given.
void read_table_region(const std::string& dir,
                       const CheckpointManifest& manifest,
                       const CheckpointTable& table,
                       int state,
                       int64_t row_offset,
                       int64_t rows,
                       int64_t col_offset,
                       int64_t cols,
                       Tensor& out,
                       int64_t* optimizer_step = nullptr);
// The same for the listed table rows (ascending): out [rows.size(), cols] or [rows.size()].
void read_table_rows(const std::string& dir,
                     const CheckpointManifest& manifest,
                     const CheckpointTable& table,
                     int state,
                     const std::vector<int64_t>& rows,
                     int64_t col_offset,
                     int64_t cols,
                     Tensor& out,
                     int64_t* optimizer_step = nullptr);
// The weights of the unsharded table `table` in blocks of consecutive rows, in order: fn(first
// row, block [n, D] of the table's saved dtype), at most `block_bytes` a block, so that a table
// of any size passes through bounded memory (ckpt quantize, ckpt export).
void for_each_table_block(const std::string& dir,
                          const CheckpointManifest& manifest,
                          const CheckpointTable& table,
                          const std::function<void(int64_t, const Tensor&)>& fn,
                          int64_t block_bytes = int64_t{64} << 20);
// Host rows of f32, f16 or bf16 as f32 (f32 returned as it is).
Tensor rows_as_f32(const Tensor& rows);
// The shard-local ids of the rows a sparse (key_value) shard saved, in the order of its files'
// rows, checked to be distinct and in range.
std::vector<int64_t> saved_row_ids(const std::string& dir, const CheckpointShard& shard);

}  // namespace shardrec::train
