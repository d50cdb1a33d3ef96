// `shardrec ckpt quantize`: a checkpoint (any world size and plan) written as one self-describing
// model directory for inference, its tables quantized row-wise (kernels/quant_embedding_bag.h:
// FBGEMM's inference layout) and its dense parameters kept as saved (f32):
//   MODEL_DIR/manifest.yaml
//     format: shardrec-quantized-model
//     version: 1
//     source_checkpoint: /abs/run/step-00000300    # what it was made from
//     source_run_id: 20261125-101500-node1-4242-8f3a9c01   # its run ("" outside a run)
//     step: 300
//     model: {type: dlrm}
//     weights: int8                                # the default; tables may override it
//     row_alignment: 16
//     tables:                                      # model order
//       - {name: t0, type: int8, num_embeddings: 20000, embedding_dim: 16, row_bytes: 32,
//          file: tables/t0.int8.bin}               # [num_embeddings, row_bytes] u8
//     dense: [{name: dense_arch..., dtype: f32, shape: [64, 13], file: dense/....bin}, ...]
//     managed_collision:                           # only for managed-collision tables
//       - {table: t4, bucket: 0, elements: 1234, file: managed_collision/t4.0.bin}  # remap, i64
//     files: [{path: tables/t0.int8.bin, bytes: 640000, crc32: 0x...}, ...]
//     manifest_crc32: 0x...                        # the last line: CRC-32 of every byte before it
// The directory is written as OUT.tmp (every file fsync'ed, engine/core/durable_file.h) and
// renamed to OUT at the end, so OUT is whole or absent; an existing OUT is refused.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/train/checkpoint_manifest.h"
#include "kernels/quant_embedding_bag.h"

namespace shardrec::train {

constexpr const char* kQuantizedModelFormat = "shardrec-quantized-model";

struct QuantizedTable {
    std::string name;
    kernels::QuantType type = kernels::QuantType::kF32;
    int64_t num_embeddings = 0;
    int64_t embedding_dim = 0;
    std::string file;
};

// The remap state of one bucket of a managed-collision table (the checkpoint's
// managed_collision/<table>.<bucket>.bin, ManagedCollisionTables::state_tensor), copied as is:
// predict, serve and eval map raw ids through it as the trained model did.
struct QuantizedRemapState {
    std::string table;
    int64_t bucket = 0;
    int64_t elements = 0;  // i64 values
    std::string file;
};

struct QuantizedModel {
    std::string dir;
    std::string source_checkpoint;
    // The run that wrote the checkpoint (its manifest's run_id); "" for a checkpoint written
    // outside a run (ckpt import, ckpt init) or a model written before the field.
    std::string source_run_id;
    int64_t step = 0;
    std::string model_type;
    kernels::QuantType weights = kernels::QuantType::kInt8;
    std::vector<QuantizedTable> tables;
    std::vector<CheckpointTensor> dense;
    std::vector<QuantizedRemapState> managed_collision;
    std::vector<CheckpointFile> files;

    const QuantizedTable* table(const std::string& name) const;
    int64_t table_bytes() const;  // the stored tables' bytes (padding included)
    int64_t dense_bytes() const;
};

// "t0=int4,t5=fp16" -> {t0: int4, t5: fp16}; errors name the bad entry.
std::map<std::string, kernels::QuantType> parse_table_types(const std::string& spec);

// Writes the model directory `out_dir` from checkpoint `checkpoint` (or the newest in it), every
// checksum of the checkpoint checked first. Tables not in `table_types` get `weights`; a name in
// table_types that is not a table is an Error. Tables pass block by block (for_each_table_block),
// so a table larger than memory quantizes too. Returns the model as written.
QuantizedModel quantize_checkpoint(const std::string& checkpoint,
                                   const std::string& out_dir,
                                   kernels::QuantType weights,
                                   const std::map<std::string, kernels::QuantType>& table_types);

// Reads MODEL_DIR/manifest.yaml (its own checksum checked) and checks the size and CRC-32 of
// every file it lists; errors name the directory, the file and the key.
QuantizedModel read_quantized_model(const std::string& dir);

// Table `table` as stored: u8 [num_embeddings * quant_row_bytes(type, dim)], memory-mapped
// read-only from its file (engine/core/mapped_file.h): every process that serves or scores the
// model on a host reads the same page-cache pages.
Tensor read_quantized_table(const QuantizedModel& model, const QuantizedTable& table);
// Rows [row_offset, row_offset + rows) of it, mapped alone (a shard's part of the file).
Tensor read_quantized_rows(const QuantizedModel& model,
                           const QuantizedTable& table,
                           int64_t row_offset,
                           int64_t rows);
// A dense parameter as stored.
Tensor read_quantized_dense(const QuantizedModel& model, const CheckpointTensor& tensor);

}  // namespace shardrec::train

namespace shardrec {
struct Parameter;
}

namespace shardrec::train {

class Trainer;
class ManagedCollisionTables;

// Loads the model's remap states into `mc` (the config's managed-collision tables): a table of
// `mc` without a state in the model, or a state for a table `mc` does not manage, is an Error
// naming the table and the directory.
void load_quantized_remap(ManagedCollisionTables& mc, const QuantizedModel& model);

// Copies the model's dense parameters into `parameters` by name; a missing name, shape or dtype
// mismatch is an Error naming the parameter.
void load_quantized_dense(const std::vector<Parameter*>& parameters, const QuantizedModel& model);

// Puts the model's weights into `trainer` (built from a config of the same model, any world size
// and plan): the dense parameters as stored, every table dequantized to f32 (the values the
// quantized lookup pools) and converted to the table's dtype into each local shard, block by
// block from the mapped files; a key_value (or cached) shard is emptied and dequantizes each row
// when a lookup first reads it, so a model larger than memory evaluates too. The remap states go
// into its managed-collision tables.
void load_quantized_model(Trainer& trainer, const QuantizedModel& model);

}  // namespace shardrec::train
