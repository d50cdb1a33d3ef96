// `shardrec ckpt init` and `shardrec ckpt import`: a checkpoint that no training step wrote.
//   init    the initial weights of CONFIG (train.seed), exactly those `train` starts from.
//   import  a TorchRec state_dict in safetensors (TorchRec's names and layouts, what
//           `ckpt export` writes; torchrec_interop.h converts) put into CONFIG's model.
// Both write OUT/step-00000000 at step 0, samples 0, with fresh optimizer state and the tables
// unsharded (one process builds the model), so `train --resume OUT` and `eval --checkpoint OUT`
// take it under any world size and plan. The model is built on the CPU: initial values do not
// depend on the device.
#pragma once

#include <string>

#include "engine/config/config.h"
#include "engine/train/torchrec_interop.h"

namespace shardrec::train {

class Trainer;

// Fills an unsharded trainer's tables and dense parameters from TorchRec state_dict entries.
// Every entry the model has must be there with its shape and dtype; an entry of another model (a
// table or parameter this config lacks) is refused by name. source: the file, for messages.
void load_torchrec_state_dict(Trainer& trainer,
                              const NamedTensors& state,
                              const std::string& source);

// Writes the initial checkpoint of `config` into out_dir; returns its directory.
std::string init_checkpoint(const Config& config, const std::string& out_dir);

// Writes the checkpoint of `config`'s model with the weights of `safetensors_path`; returns its
// directory.
std::string import_checkpoint(const std::string& safetensors_path,
                              const Config& config,
                              const std::string& out_dir);

}  // namespace shardrec::train
