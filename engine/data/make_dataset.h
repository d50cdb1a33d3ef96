// The one factory of datasets: data.type picks the implementation (dataset.h).
#pragma once

#include <memory>

#include "engine/config/config.h"
#include "engine/data/dataset.h"

namespace shardrec::data {

// synthetic: the planted-signal generator, one feature per model feature; criteo_binary: the
// preprocessed shards under data.criteo_binary.path, checked against the model's features.
std::unique_ptr<Dataset> make_dataset(const Config& config);

}  // namespace shardrec::data
