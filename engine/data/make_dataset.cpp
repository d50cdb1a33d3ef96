#include "engine/data/make_dataset.h"

#include "engine/core/error.h"
#include "engine/data/criteo_binary_dataset.h"
#include "engine/data/synthetic.h"

namespace shardrec::data {
namespace {

// One synthetic feature per (table, feature name), in the model's feature order.
SyntheticSpec synthetic_spec(const Config& config) {
    SyntheticSpec spec;
    spec.seed = static_cast<uint64_t>(config.train.seed);
    spec.num_dense = config.model.dense_in_features;
    spec.signal_scale *= config.data.synthetic.signal_scale;
    for (const auto& table : config.model.tables) {
        for (const auto& feature : table.feature_names) {
            SyntheticTable t;
            t.feature_name = feature;
            t.num_embeddings = table.num_embeddings;
            t.pooling_factor = table.pooling_factor;
            t.zipf_alpha = config.data.synthetic.zipf_alpha;
            t.weighted = table.weighted;
            t.max_length = table.position_weights;
            spec.tables.push_back(t);
        }
    }
    return spec;
}

CriteoBinaryOptions criteo_binary_options(const Config& config) {
    SR_CHECK(config.model.dense_in_features == kCriteoNumDense,
             "data.type criteo_binary has {} dense features but model.dense_in_features is {}",
             kCriteoNumDense, config.model.dense_in_features);
    CriteoBinaryOptions o;
    o.path = config.data.criteo_binary.path;
    o.eval_days = config.data.criteo_binary.eval_days;
    o.eval_fraction = config.data.criteo_binary.eval_fraction;
    for (const auto& table : config.model.tables) {
        SR_CHECK(!table.weighted,
                 "data.type criteo_binary has no per-id weights, but table '{}' "
                 "is weighted",
                 table.name);
        for (const auto& feature : table.feature_names) {
            o.feature_names.push_back(feature);
            o.num_embeddings.push_back(table.num_embeddings);
        }
    }
    return o;
}

}  // namespace

std::unique_ptr<Dataset> make_dataset(const Config& config) {
    if (config.data.type == "criteo_binary") {
        return std::make_unique<CriteoBinaryDataset>(criteo_binary_options(config));
    }
    SR_CHECK(config.data.type == "synthetic", "data.type '{}' is not supported", config.data.type);
    return std::make_unique<SyntheticDataset>(synthetic_spec(config));
}

}  // namespace shardrec::data
