// The manifest of a checkpoint (manifest.yaml): the model signature, where every table shard sat
// in the plan that wrote it, and every file with its size and CRC-32. Tensors are raw row-major
// little-endian files (no header); the manifest gives their dtype and shape. Example:
//   format: shardrec-checkpoint
//   version: 2
//   run_id: 20261125-101500-node1-4242-8f3a9c01   # the run that wrote it (pruning keeps to it)
//   step: 20                      # completed steps
//   samples: 320                  # global samples consumed: the data position to continue from
//   seed: 7
//   world_size: 2
//   global_batch_size: 16
//   model: {type: dlrm, sparse_optimizer: adagrad, sparse_state: [momentum1], dense_optimizer:
//   adam} tables:
//     - name: big
//       num_embeddings: 301
//       embedding_dim: 8
//       dtype: f32
//       sharding_type: row_wise
//       shards:
//         - {rank: 0, offsets: [0, 0], sizes: [151, 8], optimizer_step: 21,
//            files: [tables/big.0.0.weight.bin, tables/big.0.0.momentum1.bin]}
//         # a key_value shard saves only its rows not at their initial value: their ids
//         # (shard-local, distinct, i64), then the files hold those rows in that order
//         - {rank: 1, offsets: [151, 0], sizes: [150, 8], optimizer_step: 21, stored_rows: 40,
//            row_ids: tables/big.151.0.row_ids.bin, files: [...]}
//   dense: [{name: dense_arch.model._mlp.0._linear.weight, dtype: f32, shape: [16, 13],
//            file: dense/dense_arch.model._mlp.0._linear.weight.bin}, ...]
//   dense_optimizer: [{name: step, dtype: i64, shape: [1], file: ...}, ...]
//   files: [{path: tables/big.0.0.weight.bin, bytes: 4832, crc32: 0x1c291ca3}, ...]
//   manifest_crc32: 0x5e1d04a7    # the last line: CRC-32 of every byte before it
// A version 1 manifest (no run_id, samples or checksum) is read with samples = step x
// global_batch_size and no checksum to check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/tensor.h"

namespace shardrec::train {

constexpr const char* kCheckpointFormat = "shardrec-checkpoint";
constexpr int kCheckpointVersion = 2;
constexpr const char* kManifestName = "manifest.yaml";

struct CheckpointFile {
    std::string path;  // relative to the checkpoint directory
    int64_t bytes = 0;
    uint32_t crc32 = 0;
};

// One dense tensor (a parameter or a dense optimizer state).
struct CheckpointTensor {
    std::string name;
    DType dtype = DType::kF32;
    Shape shape;
    std::string file;
};

// One saved table shard: rows [row_offset, +rows) x columns [col_offset, +cols).
struct CheckpointShard {
    int rank = 0;  // the rank that wrote it
    int64_t row_offset = 0, rows = 0, col_offset = 0, cols = 0;
    int64_t optimizer_step = 1;
    std::vector<std::string> files;  // weight, then one per sparse state name
    // Sparse shards (key_value): the rows saved, the file of their ids; -1 and "": every row.
    // A row not saved is at its initial value: the weights of (seed, table index, row, column),
    // the state at CheckpointManifest::initial_accumulator_value (Adagrad) or 0.
    int64_t stored_rows = -1;
    std::string row_ids;
};

struct CheckpointTable {
    std::string name;
    int64_t num_embeddings = 0;
    int64_t embedding_dim = 0;
    DType dtype = DType::kF32;
    std::string sharding_type;  // "unsharded" when written by one process
    std::vector<CheckpointShard> shards;
};

struct CheckpointManifest {
    int version = kCheckpointVersion;
    std::string run_id;  // "" when written outside a run (tests, tools) or by version 1
    int64_t step = 0;
    int64_t samples = 0;  // global samples the saved steps consumed
    int64_t seed = 0;
    int world_size = 1;
    int64_t global_batch_size = 0;
    std::string model_type;
    std::string sparse_optimizer;           // optimizer.sparse.type
    std::vector<std::string> sparse_state;  // the state names of every shard, in order
    double initial_accumulator_value = 0;   // Adagrad's state start (rows not saved)
    std::string dense_optimizer;            // optimizer.dense.type
    std::vector<CheckpointTable> tables;    // model order
    std::vector<CheckpointTensor> dense;    // the model's parameters() order
    std::vector<CheckpointTensor> dense_optimizer_state;  // DenseOptimizer::state() order
    std::vector<CheckpointFile> files;

    const CheckpointTable* table(const std::string& name) const;
    const CheckpointFile& file(const std::string& path) const;  // throws when not listed
    int64_t total_bytes() const;
};

// The state names of a fused optimizer (TorchRec's fused optimizer state_dict keys):
// sgd {}, adagrad and rowwise_adagrad {momentum1}, adam {exp_avg, exp_avg_sq}.
std::vector<std::string> sparse_state_names(const std::string& sparse_optimizer);

// The manifest's text, ending with its manifest_crc32 line.
std::string manifest_to_yaml(const CheckpointManifest& manifest);
// Reads `dir`/manifest.yaml; errors name the file and the bad key, and a manifest whose
// checksum does not match its text (edited or damaged) is refused.
CheckpointManifest read_manifest(const std::string& dir);
CheckpointManifest parse_manifest(const std::string& text, const std::string& source);

// The shards' part of a manifest as YAML text (what each rank sends to rank 0), and back.
std::string shards_to_yaml(const std::vector<std::pair<std::string, CheckpointShard>>& shards,
                           const std::vector<CheckpointFile>& files);
void append_shards_from_yaml(const std::string& text, CheckpointManifest& manifest);

}  // namespace shardrec::train
