// The one factory of datasets: data.type picks the implementation (dataset.h).
#pragma once

#include <memory>

#include "engine/config/config.h"
#include "engine/data/dataset.h"

namespace shardrec::data {

// synthetic: the planted-signal generator, one feature per model feature; criteo_binary: the
// preprocessed shards under data.criteo_binary.path, checked against the model's features. With
// train.eval_samples > 0 a finite eval split must hold at least that many rows (an error naming
// both numbers, never silently repeated rows).
std::unique_ptr<Dataset> make_dataset(const Config& config);

}  // namespace shardrec::data
