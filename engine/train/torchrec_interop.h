// TorchRec interop of checkpoints: shardrec's dense parameters (Module::parameters names and
// layouts, what a checkpoint stores) and the state_dict of TorchRec's own model of that shape:
//   dlrm      torchrec.models.dlrm.DLRM
//   dlrm_dcn  torchrec.models.dlrm.DLRM_DCN
//   deepfm    torchrec.models.deepfm.SimpleDeepFMNN (bottom_mlp [h, D], deepfm.hidden [k],
//             top_mlp [1]: the only shape that class builds)
// Tables are sparse_arch.embedding_bag_collection.embedding_bags.<table>.weight on both sides.
// Two things differ, and are converted here, on export and on import:
//   names    shardrec's over arch is an MLP "over_arch.model" plus its last linear layer
//            "over_arch.final"; TorchRec's OverArch is nn.Sequential(MLP, nn.Linear), so the
//            layers are over_arch.model.0._mlp.<i>._linear.* and over_arch.model.1.{weight,bias}.
//            SimpleDeepFMNN's archs are nn.Sequential of nn.Linear and activations
//            (dense_arch.model.0, dense_arch.model.2, inter_arch.deep_fm.dense_module.0,
//            over_arch.model.0).
//   columns  DLRM's over arch reads [dense, the F(F+1)/2 dots]. shardrec's dot kernel lists the
//            pairs as facebookresearch DLRM's strictly lower triangle, row-major ((1,0), (2,0),
//            (2,1), ...); TorchRec's InteractionArch takes triu_indices(F+1, F+1, offset=1)
//            ((0,1), (0,2), ..., (1,2), ...). The first over-arch layer's weight columns are
//            permuted; the permutation is a gather, so it is exact both ways.
// Why convert at this boundary rather than store TorchRec's layout: a checkpoint is shardrec's
// own sharded format (version 2) read by resume and eval under any plan; renaming parameters
// would change every parameter's initial values (they are keyed by name) and make old
// checkpoints unreadable, and reordering the dot kernel's columns (CPU, CUDA, the float64
// reference) would make old checkpoints' first over-arch layer silently wrong. The conversion
// touches one [H, D + P] matrix and a few names, and is the same code for export and import.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace shardrec::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The tensor named `name` in `all`; nullptr when there is none.
const Tensor* find_tensor(const NamedTensors& all, const std::string& name);

// "torchrec.models.dlrm.DLRM", "torchrec.models.dlrm.DLRM_DCN",
// "torchrec.models.deepfm.SimpleDeepFMNN".
std::string torchrec_model_class(const std::string& model_type);

// "" when TorchRec's model class can hold a model of these dense parameters, else why not (e.g.
// TorchRec's OverArch needs a top_mlp of at least 2 layers).
std::string torchrec_shape_problem(const std::string& model_type, const NamedTensors& dense);

// The TorchRec state_dict name of a shardrec dense parameter.
std::string torchrec_name(const std::string& model_type,
                          const std::string& name,
                          const NamedTensors& dense);

// For TorchRec's InteractionArch column k (k < F(F+1)/2, after the D dense columns), the column
// of the same pair in shardrec's dot interaction output (kernels/dot_interaction.h).
std::vector<int64_t> torchrec_interaction_columns(int64_t num_sparse_features);

// The dense parameters as TorchRec's state_dict entries, in the same order: renamed, and for dlrm
// the first over-arch layer's columns permuted. embedding_dim: the tables' common D.
NamedTensors dense_to_torchrec(const std::string& model_type,
                               int64_t embedding_dim,
                               const NamedTensors& dense);

// The inverse: fills shardrec's parameters `dense` (names and shapes given, values written) from
// TorchRec state_dict entries `state`. A missing name or another shape is an error naming both
// (source: the file, for messages); names in `state` that the model does not have are refused.
void dense_from_torchrec(const std::string& model_type,
                         int64_t embedding_dim,
                         const NamedTensors& state,
                         const std::string& source,
                         NamedTensors& dense);

// Reads a safetensors file (F32, F16, BF16, I32, I64): the tensors in file order. A malformed
// header or a file shorter than its header says is refused, naming the file.
NamedTensors read_safetensors(const std::string& path);

}  // namespace shardrec::train
