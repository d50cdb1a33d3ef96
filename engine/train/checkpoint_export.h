// `shardrec ckpt info` and `shardrec ckpt export`: what a checkpoint holds, and its model as
// unsharded tensors that are exactly the state_dict of TorchRec's own model of that shape
// (torchrec.models.dlrm.DLRM, DLRM_DCN, deepfm.SimpleDeepFMNN; names and the over arch's column
// order converted by torchrec_interop.h), so load_state_dict(strict=True) takes it as it is:
//   sparse_arch.embedding_bag_collection.embedding_bags.<table>.weight   [E, D]
//   dense_arch.model._mlp.0._linear.weight, ..., over_arch.model.0._mlp.0._linear.weight, ...,
//   over_arch.model.1.weight, over_arch.model.1.bias
// Formats: npy (one NAME.npy per tensor, NumPy format 1.0; bf16 tables are written as f32, NumPy
// has no bfloat16) and safetensors (one model.safetensors: u64 header size, JSON header with
// dtype, shape and data_offsets per tensor, then the data). Optimizer state is not exported.
// A managed-collision table's map goes beside the tables, in either format, as
// managed_collision/<table>.id_to_row.npy: i64 [slots, 2], (raw id, row) per occupied slot.
#pragma once

#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace shardrec::train {

// The export name of a table's weight.
std::string table_export_name(const std::string& table);

// A human-readable summary: step, seed, world size, model, optimizers, every table with its
// sharding and shards, dense parameters, files and bytes, and whether every checksum holds.
std::string checkpoint_info(const std::string& dir);

// Checks every checksum, then writes the unsharded tables and the dense parameters of checkpoint
// `dir` (or the newest in it) into out_dir (created). format: npy | safetensors. Each file is
// written under a temporary name and renamed; the tables pass block by block (bounded memory,
// whatever their size). Returns the tensor names, in the order written.
std::vector<std::string> export_checkpoint(const std::string& dir,
                                           const std::string& format,
                                           const std::string& out_dir);

// NumPy .npy (format 1.0, little-endian, C order) of a f32, f16, i32 or i64 tensor.
void write_npy(const std::string& path, const Tensor& t);

}  // namespace shardrec::train
