#include "engine/data/make_dataset.h"

#include <algorithm>

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
    spec.raw_id_eval_offset = config.data.synthetic.raw_id_eval_offset;
    const std::vector<std::string>& mod_tables = config.data.synthetic.raw_id_mod_tables;
    for (const auto& name : mod_tables) {
        const auto it = std::find_if(config.model.tables.begin(), config.model.tables.end(),
                                     [&](const ModelConfig::Table& t) { return t.name == name; });
        SR_CHECK(it != config.model.tables.end(),
                 "data.synthetic.raw_id_mod_tables names '{}', which is not in model.tables", name);
        SR_CHECK(it->managed_collision.zch_size == 0,
                 "data.synthetic.raw_id_mod_tables names '{}', which has managed_collision (its "
                 "raw ids go through the remap, not mod num_embeddings)",
                 name);
        SR_CHECK(config.data.synthetic.raw_id_drift > 0,
                 "data.synthetic.raw_id_mod_tables names '{}' but data.synthetic.raw_id_drift is 0",
                 name);
    }
    for (const auto& table : config.model.tables) {
        const bool mod =
            std::find(mod_tables.begin(), mod_tables.end(), table.name) != mod_tables.end();
        for (const auto& feature : table.feature_names) {
            SyntheticTable t;
            t.feature_name = feature;
            t.num_embeddings = table.num_embeddings;
            t.pooling_factor = table.pooling_factor;
            t.zipf_alpha = config.data.synthetic.zipf_alpha;
            t.weighted = table.weighted;
            t.max_length = table.position_weights;
            if (table.managed_collision.zch_size > 0 || mod)
                t.raw_id_drift = config.data.synthetic.raw_id_drift;
            t.raw_id_mod = mod;
            if (t.raw_id_drift > 0)
                t.raw_id_vocabulary = config.data.synthetic.raw_id_vocabulary;
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
            o.table_names.push_back(table.name);
            o.managed.push_back(table.managed_collision.zch_size > 0);
        }
    }
    return o;
}

void check_eval_split(const Config& config, const Dataset& dataset) {
    const int64_t rows = dataset.num_samples(Split::kEval);
    const int64_t wanted = config.train.eval_samples;
    if (rows < 0 || wanted == 0) {  // generated (unbounded), or no evaluation
        return;
    }
    const auto& c = config.data.criteo_binary;
    SR_CHECK(rows > 0,
             "train.eval_samples is {} but the eval split of {} is empty "
             "(data.criteo_binary.eval_days {}, eval_fraction {}); set eval_days or "
             "eval_fraction, or train.eval_samples: 0",
             wanted, c.path, c.eval_days, c.eval_fraction);
    // More rows than the split holds: the Trainer refuses that with the whole batches it reads.
}

}  // namespace

std::unique_ptr<Dataset> make_dataset(const Config& config) {
    if (config.data.type == "criteo_binary") {
        auto dataset = std::make_unique<CriteoBinaryDataset>(criteo_binary_options(config));
        check_eval_split(config, *dataset);
        return dataset;
    }
    SR_CHECK(config.data.type == "synthetic", "data.type '{}' is not supported", config.data.type);
    return std::make_unique<SyntheticDataset>(synthetic_spec(config));
}

}  // namespace shardrec::data
