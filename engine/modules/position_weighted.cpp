// PositionWeightedModule: position j of a bag is j = n - offsets[bag] (TorchRec's
// offsets_range), looked up in the key's position-weight vector (see the header).
#include "engine/modules/position_weighted.h"

#include <algorithm>

namespace shardrec {

PositionWeightedModule::PositionWeightedModule(
    std::vector<std::pair<std::string, int64_t>> max_feature_lengths) {
    for (const auto& [feature, max_length] : max_feature_lengths) {
        SR_CHECK(max_length > 0, "PositionWeightedModule: feature '{}' needs max_length > 0",
                 feature);
        SR_CHECK(feature_index(feature) < 0, "PositionWeightedModule: feature '{}' twice", feature);
        features_.push_back(feature);
        weights_.emplace_back("position_weights." + feature,
                              Tensor::zeros({max_length}, DType::kF32));
    }
    reset_parameters();
}

void PositionWeightedModule::reset_parameters() {
    for (Parameter& p : weights_) {
        float* w = p.value.data<float>();
        std::fill(w, w + p.value.numel(), 1.0f);
    }
}

int64_t PositionWeightedModule::feature_index(const std::string& feature) const {
    const auto it = std::find(features_.begin(), features_.end(), feature);
    return it == features_.end() ? -1 : static_cast<int64_t>(it - features_.begin());
}

KeyedJaggedTensor PositionWeightedModule::with_positions(const KeyedJaggedTensor& features,
                                                         Tensor& buffer) const {
    SR_CHECK(features.values().device().is_cpu(), "PositionWeightedModule: host KJT needed");
    const int64_t num_values = features.values().numel();
    Tensor weights = grow_prefix(buffer, num_values, DType::kF32);
    float* out = weights.data<float>();
    if (features.has_weights()) {
        std::copy(features.weights().data<float>(), features.weights().data<float>() + num_values,
                  out);
    } else {
        std::fill(out, out + num_values, 1.0f);
    }
    const int64_t* offsets = features.offsets().data<int64_t>();
    for (int64_t k = 0; k < features.num_keys(); ++k) {
        const int64_t p = feature_index(features.keys()[static_cast<size_t>(k)]);
        if (p < 0) {
            continue;
        }
        const int64_t max_length = weights_[static_cast<size_t>(p)].value.numel();
        const int64_t first = features.lengths_offset_per_key()[static_cast<size_t>(k)];
        const int64_t last = features.lengths_offset_per_key()[static_cast<size_t>(k) + 1];
        for (int64_t bag = first; bag < last; ++bag) {
            const int64_t length = offsets[bag + 1] - offsets[bag];
            SR_CHECK(length <= max_length,
                     "PositionWeightedModule: feature '{}' sample {} has {} ids, more than its "
                     "max length {} (model.tables[].position_weights)",
                     features_[static_cast<size_t>(p)], bag - first, length, max_length);
            for (int64_t j = 0; j < length; ++j) {
                out[offsets[bag] + j] = static_cast<float>(j);
            }
        }
    }
    return features.with_weights(weights);
}

void PositionWeightedModule::weights_at(int64_t p,
                                        const float* positions,
                                        int64_t n,
                                        float* out) const {
    const float* pw = weights_[static_cast<size_t>(p)].value.data<float>();
    for (int64_t i = 0; i < n; ++i) {
        out[i] = pw[static_cast<int64_t>(positions[i])];
    }
}

void PositionWeightedModule::accumulate_grad(
    int64_t p, const float* positions, const float* grad, int64_t n, float scale) {
    float* g = weights_[static_cast<size_t>(p)].grad.data<float>();
    for (int64_t i = 0; i < n; ++i) {
        g[static_cast<int64_t>(positions[i])] += scale * grad[i];
    }
}

void PositionWeightedModule::zero_grad() {
    for (Parameter& p : weights_) {
        p.grad.zero_();
    }
}

// The positions go into the weights buffer, then each position-weighted key's become weights.
KeyedJaggedTensor PositionWeightedModule::forward(const KeyedJaggedTensor& features) {
    positions_ = with_positions(features, positions_buffer_);
    const int64_t num_values = features.values().numel();
    Tensor weights = grow_prefix(weights_buffer_, num_values, DType::kF32);
    const float* positions = positions_.weights().data<float>();
    float* out = weights.data<float>();
    std::copy(positions, positions + num_values, out);
    for (int64_t k = 0; k < features.num_keys(); ++k) {
        const int64_t p = feature_index(features.keys()[static_cast<size_t>(k)]);
        if (p >= 0) {
            const int64_t v0 = positions_.offset_per_key()[static_cast<size_t>(k)];
            const int64_t v1 = positions_.offset_per_key()[static_cast<size_t>(k) + 1];
            weights_at(p, positions + v0, v1 - v0, out + v0);
        }
    }
    return features.with_weights(weights);
}

void PositionWeightedModule::backward(const Tensor& grad_weights) {
    SR_CHECK(grad_weights.dtype() == DType::kF32 &&
                 grad_weights.shape() == Shape({positions_.values().numel()}),
             "PositionWeightedModule::backward: grad_weights must be f32[{}], got {}",
             positions_.values().numel(), grad_weights.str());
    zero_grad();
    const float* positions = positions_.weights().data<float>();
    for (int64_t k = 0; k < positions_.num_keys(); ++k) {
        const int64_t p = feature_index(positions_.keys()[static_cast<size_t>(k)]);
        if (p >= 0) {
            const int64_t v0 = positions_.offset_per_key()[static_cast<size_t>(k)];
            const int64_t v1 = positions_.offset_per_key()[static_cast<size_t>(k) + 1];
            accumulate_grad(p, positions + v0, grad_weights.data<float>() + v0, v1 - v0);
        }
    }
}

std::vector<Parameter*> PositionWeightedModule::parameters() {
    std::vector<Parameter*> out;
    for (Parameter& p : weights_) {
        out.push_back(&p);
    }
    return out;
}

const Tensor& PositionWeightedModule::position_weight(const std::string& feature) const {
    const int64_t p = feature_index(feature);
    SR_CHECK(p >= 0, "PositionWeightedModule: no position weights for feature '{}'", feature);
    return weights_[static_cast<size_t>(p)].value;
}

std::unique_ptr<PositionWeightedModule> make_position_weighted_module(
    const std::vector<EmbeddingBagConfig>& tables) {
    std::vector<std::pair<std::string, int64_t>> max_feature_lengths;
    for (const EmbeddingBagConfig& c : tables) {
        for (const std::string& f : c.feature_names) {
            if (c.position_weights > 0)
                max_feature_lengths.emplace_back(f, c.position_weights);
        }
    }
    if (max_feature_lengths.empty())
        return nullptr;
    return std::make_unique<PositionWeightedModule>(std::move(max_feature_lengths));
}

}  // namespace shardrec
