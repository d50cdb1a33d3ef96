#include "engine/modules/model.h"

#include "engine/modules/deepfm_model.h"
#include "engine/modules/dlrm.h"

namespace shardrec {

kernels::FusedOptimizerParams sparse_optimizer_params(const OptimizerConfig::Sparse& sparse) {
    kernels::FusedOptimizerParams p;
    if (sparse.type == "sgd") {
        p.type = kernels::OptimType::kSgd;
    } else if (sparse.type == "adagrad") {
        p.type = kernels::OptimType::kExactAdagrad;
    } else if (sparse.type == "rowwise_adagrad") {
        p.type = kernels::OptimType::kExactRowWiseAdagrad;
    } else if (sparse.type == "adam") {
        p.type = kernels::OptimType::kAdam;
    } else {
        SR_CHECK(false, "optimizer.sparse.type: unknown optimizer '{}'", sparse.type);
    }
    p.learning_rate = static_cast<float>(sparse.learning_rate);
    p.eps = static_cast<float>(sparse.eps);
    p.beta1 = static_cast<float>(sparse.beta1);
    p.beta2 = static_cast<float>(sparse.beta2);
    p.weight_decay = static_cast<float>(sparse.weight_decay);
    p.initial_accumulator_value = static_cast<float>(sparse.initial_accumulator_value);
    return p;
}

std::vector<EmbeddingBagConfig> embedding_bag_configs(const ModelConfig& model) {
    std::vector<EmbeddingBagConfig> tables;
    for (const auto& t : model.tables) {
        EmbeddingBagConfig c;
        c.name = t.name;
        c.num_embeddings = t.num_embeddings;
        c.embedding_dim = t.embedding_dim;
        c.feature_names = t.feature_names;
        c.pooling = t.pooling == "mean" ? PoolingMode::kMean : PoolingMode::kSum;
        c.data_type = dtype_from_name(t.data_type);
        c.position_weights = t.position_weights;
        tables.push_back(std::move(c));
    }
    return tables;
}

bool is_weighted(const ModelConfig& model) {
    for (const auto& t : model.tables) {
        if (t.weighted)
            return true;
    }
    return false;
}

std::unique_ptr<EmbeddingBagCollection> make_embedding_bag_collection(
    const ModelConfig& model,
    uint64_t seed,
    const kernels::FusedOptimizerParams& sparse_optimizer,
    Device device) {
    return std::make_unique<EmbeddingBagCollection>(
        embedding_bag_configs(model), is_weighted(model), seed, sparse_optimizer, device);
}

std::unique_ptr<RecModel> make_model(const ModelConfig& model,
                                     uint64_t seed,
                                     std::unique_ptr<EmbeddingBagCollectionInterface> sparse_arch) {
    if (model.type == "dlrm") {
        return std::make_unique<DLRM>(model, seed, std::move(sparse_arch), DLRM::Interaction::kDot);
    }
    if (model.type == "dlrm_dcn") {
        return std::make_unique<DLRM>(model, seed, std::move(sparse_arch), DLRM::Interaction::kDcn);
    }
    if (model.type == "deepfm") {
        return std::make_unique<DeepFMModel>(model, seed, std::move(sparse_arch));
    }
    SR_CHECK(false, "model.type: unknown model '{}' (dlrm, dlrm_dcn, deepfm)", model.type);
    return nullptr;
}

}  // namespace shardrec
