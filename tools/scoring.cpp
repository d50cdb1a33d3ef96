#include "tools/scoring.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/modules/model.h"
#include "engine/train/run_dir.h"

namespace shardrec::cli {

std::vector<const train::QuantizedTable*> model_tables(const Config& config,
                                                       const train::QuantizedModel& model) {
    std::vector<const train::QuantizedTable*> out;
    for (const EmbeddingBagConfig& c : embedding_bag_configs(config.model)) {
        const train::QuantizedTable* t = model.table(c.name);
        SR_CHECK(t != nullptr, "quantized model {}: no table '{}' (of the config's model)",
                 model.dir, c.name);
        SR_CHECK(t->num_embeddings == c.num_embeddings && t->embedding_dim == c.embedding_dim,
                 "quantized model {}: table '{}' is [{}, {}], the config's [{}, {}]", model.dir,
                 t->name, t->num_embeddings, t->embedding_dim, c.num_embeddings, c.embedding_dim);
        out.push_back(t);
    }
    SR_CHECK(out.size() == model.tables.size(),
             "quantized model {} has {} tables, the config's model {}", model.dir,
             model.tables.size(), out.size());
    return out;
}

std::vector<QuantTable> quant_tables(const Config& config, const train::QuantizedModel& model) {
    const std::vector<const train::QuantizedTable*> tables = model_tables(config, model);
    const std::vector<EmbeddingBagConfig> configs = embedding_bag_configs(config.model);
    std::vector<QuantTable> out;
    for (size_t i = 0; i < tables.size(); ++i)
        out.push_back(QuantTable{configs[i], tables[i]->type,
                                 train::read_quantized_table(model, *tables[i])});
    return out;
}

std::string model_config_path(const std::string& config_arg, const train::QuantizedModel& model) {
    if (!config_arg.empty())
        return config_arg;
    // The run directory of the quantized checkpoint (RUN/checkpoints/step-N), taken only when its
    // run.yaml names the run that wrote the checkpoint: a config.yaml that merely lies there
    // (beside a checkpoint of ckpt import, or one moved) would score with another model's settings.
    const std::filesystem::path run =
        std::filesystem::path(model.source_checkpoint).parent_path().parent_path();
    const std::string guess = (run / "config.yaml").string();
    SR_CHECK(!model.source_run_id.empty(),
             "quantized model {}: its checkpoint {} was not written by a training run (ckpt "
             "import or ckpt init), so no run's config goes with it; pass --config CONFIG.yaml",
             model.dir, model.source_checkpoint);
    SR_CHECK(std::filesystem::is_regular_file(guess),
             "quantized model {}: no --config given and its run's config '{}' is not there; "
             "pass --config CONFIG.yaml",
             model.dir, guess);
    const std::string held = train::read_run_id(run.string());
    SR_CHECK(held == model.source_run_id,
             "quantized model {}: '{}' is not the directory of the run that wrote its checkpoint "
             "({}, the model's is {}); pass --config CONFIG.yaml",
             model.dir, run.string(),
             held.empty() ? std::string("no run.yaml there") : "it holds run " + held,
             model.source_run_id);
    log::root().info("config: {} (the model's run; --config chooses another)", guess);
    return guess;
}

data::ScoreSchema score_schema(const Config& config) {
    data::ScoreSchema s;
    s.num_dense = config.model.dense_in_features;
    for (const EmbeddingBagConfig& c : embedding_bag_configs(config.model)) {
        // A managed-collision table takes raw ids (any id >= 0), remapped to rows before the
        // lookup.
        bool managed = false, weighted = false;
        for (const ModelConfig::Table& t : config.model.tables) {
            managed = managed || (t.name == c.name && t.managed_collision.zch_size > 0);
            weighted = weighted || (t.name == c.name && t.weighted);
        }
        for (const std::string& f : c.feature_names) {
            s.features.push_back(f);
            s.rows.push_back(managed ? data::ScoreSchema::kRawIds : c.num_embeddings);
            s.feature_weighted.push_back(weighted);
        }
    }
    s.weighted = is_weighted(config.model);
    return s;
}

Batch examples_batch(const std::vector<const data::ScoreRequest*>& parts,
                     const data::ScoreSchema& schema) {
    const size_t F = schema.features.size();
    int64_t B = 0, N = 0;
    for (const data::ScoreRequest* r : parts) {
        B += r->count;
        for (size_t f = 0; f < F; ++f)
            N += static_cast<int64_t>(r->ids[f].size());
    }
    Batch batch;
    batch.dense = Tensor::empty({B, schema.num_dense}, DType::kF32);
    batch.labels = Tensor::zeros({B}, DType::kF32);
    Tensor lengths = Tensor::empty({static_cast<int64_t>(F) * B}, DType::kI64);
    Tensor values = Tensor::empty({N}, DType::kI64);
    std::optional<Tensor> weights;
    if (schema.weighted)
        weights = Tensor::empty({N}, DType::kF32);
    float* dense = batch.dense.data<float>();
    for (const data::ScoreRequest* r : parts) {
        std::copy(r->dense.begin(), r->dense.end(), dense);
        dense += r->dense.size();
    }
    int64_t* len = lengths.data<int64_t>();
    int64_t* val = values.data<int64_t>();
    float* w = weights ? weights->data<float>() : nullptr;
    for (size_t f = 0; f < F; ++f) {  // key-major, as the KJT lays them out
        for (const data::ScoreRequest* r : parts) {
            len = std::copy(r->lengths[f].begin(), r->lengths[f].end(), len);
            val = std::copy(r->ids[f].begin(), r->ids[f].end(), val);
            if (w != nullptr)
                w = std::copy(r->weights[f].begin(), r->weights[f].end(), w);
        }
    }
    batch.sparse = KeyedJaggedTensor::from_lengths_sync(schema.features, std::move(values),
                                                        std::move(lengths), std::move(weights), B);
    return batch;
}

float score_of(float logit) {
    return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logit))));
}

namespace {

// A request body's examples as a Dataset: batch(start, count) is those examples, in order.
class ExamplesDataset : public data::Dataset {
public:
    ExamplesDataset(data::ScoreRequest all, data::ScoreSchema schema)
        : all_(std::move(all)), schema_(std::move(schema)) {}

    Batch batch(int64_t start, int64_t count, data::Split /*split*/) const override {
        SR_CHECK(start >= 0 && count >= 0 && start + count <= all_.count,
                 "examples [{}, {}) outside the file's {}", start, start + count, all_.count);
        const size_t F = schema_.features.size();
        data::ScoreRequest part;
        part.count = count;
        part.dense.assign(all_.dense.begin() + start * schema_.num_dense,
                          all_.dense.begin() + (start + count) * schema_.num_dense);
        part.lengths.resize(F);
        part.ids.resize(F);
        part.weights.resize(schema_.weighted ? F : 0);
        for (size_t f = 0; f < F; ++f) {
            const std::vector<int64_t>& l = all_.lengths[f];
            int64_t begin = 0;
            for (int64_t b = 0; b < start; ++b)
                begin += l[static_cast<size_t>(b)];
            int64_t n = 0;
            for (int64_t b = start; b < start + count; ++b)
                n += l[static_cast<size_t>(b)];
            part.lengths[f].assign(l.begin() + start, l.begin() + start + count);
            part.ids[f].assign(all_.ids[f].begin() + begin, all_.ids[f].begin() + begin + n);
            if (schema_.weighted)
                part.weights[f].assign(all_.weights[f].begin() + begin,
                                       all_.weights[f].begin() + begin + n);
        }
        return examples_batch({&part}, schema_);
    }

    int64_t num_samples(data::Split /*split*/) const override { return all_.count; }

    std::vector<std::string> feature_names() const override { return schema_.features; }

private:
    data::ScoreRequest all_;
    data::ScoreSchema schema_;
};

}  // namespace

std::unique_ptr<data::Dataset> examples_dataset(const std::string& path,
                                                const data::ScoreSchema& schema) {
    std::ifstream in(path, std::ios::binary);
    SR_CHECK(in.good(), "--data '{}': cannot open the file", path);
    std::ostringstream text;
    text << in.rdbuf();
    data::ScoreRequest request;
    data::ScoreError error;
    SR_CHECK(data::parse_score_request(text.str(), schema, request, error), "--data '{}': {}", path,
             error.message);
    return std::make_unique<ExamplesDataset>(std::move(request), schema);
}

}  // namespace shardrec::cli
