// What `shardrec predict` and `shardrec serve` share: the quantized model's tables checked against
// the config, the request schema of the model's inputs, and a Batch built from score requests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/dataset.h"
#include "engine/data/score_request.h"
#include "engine/modules/quant_embedding_bag_collection.h"
#include "engine/train/quantized_model.h"

namespace shardrec::cli {

// The quantized tables of the config's model, checked against the model directory.
std::vector<QuantTable> quant_tables(const Config& config, const train::QuantizedModel& model);
// The model directory's table of each of the config's tables, in the config's order; an Error
// names a table that is missing or of another shape.
std::vector<const train::QuantizedTable*> model_tables(const Config& config,
                                                       const train::QuantizedModel& model);

// The model's config: `config_arg` if given, else config.yaml of the run whose checkpoint was
// quantized (RUN/checkpoints/step-N -> RUN/config.yaml, where RUN/run.yaml holds that run's id),
// logged; an Error when there is no such run directory.
std::string model_config_path(const std::string& config_arg, const train::QuantizedModel& model);

// The model's inputs: dense width, features in table order, rows of each feature's table.
data::ScoreSchema score_schema(const Config& config);

// One Batch of the requests' examples in order (labels 0: they are not read when scoring).
Batch examples_batch(const std::vector<const data::ScoreRequest*>& parts,
                     const data::ScoreSchema& schema);

// The click probability of a logit, as `eval --predictions` computes it.
float score_of(float logit);

// The examples of a request body in a file (`predict --data FILE.json`); an Error names the file,
// the field and the example.
std::unique_ptr<data::Dataset> examples_dataset(const std::string& path,
                                                const data::ScoreSchema& schema);

}  // namespace shardrec::cli
