// PositionWeightedModule: position j of a bag is j = n - offsets[bag] (TorchRec's
// offsets_range), looked up in the key's position-weight vector (see the header).
#include "engine/modules/position_weighted.h"

#include <algorithm>

#include "engine/modules/embedding_config.h"

namespace shardrec {
namespace {

// Index of `name` in `names`, or -1.
int64_t find_index(const std::vector<std::string>& names, const std::string& name) {
    const auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? -1 : static_cast<int64_t>(it - names.begin());
}

}  // namespace

PositionWeightedModule::PositionWeightedModule(
    std::vector<std::pair<std::string, int64_t>> max_feature_lengths) {
    for (const auto& [feature, max_length] : max_feature_lengths) {
        SR_CHECK(max_length > 0, "PositionWeightedModule: feature '{}' needs max_length > 0",
                 feature);
        SR_CHECK(find_index(features_, feature) < 0, "PositionWeightedModule: feature '{}' twice",
                 feature);
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

KeyedJaggedTensor PositionWeightedModule::forward(const KeyedJaggedTensor& features) {
    SR_CHECK(features.values().device().is_cpu(), "PositionWeightedModule: host KJT needed");
    const int64_t num_values = features.values().numel();
    Tensor weights = grow_prefix(weights_buffer_, num_values, DType::kF32);
    float* out = weights.data<float>();
    std::fill(out, out + num_values, 1.0f);
    const int64_t* offsets = features.offsets().data<int64_t>();
    for (int64_t k = 0; k < features.num_keys(); ++k) {
        const int64_t p = find_index(features_, features.keys()[static_cast<size_t>(k)]);
        if (p < 0) {
            continue;
        }
        const Tensor& pw = weights_[static_cast<size_t>(p)].value;
        const int64_t first = features.lengths_offset_per_key()[static_cast<size_t>(k)];
        const int64_t last = features.lengths_offset_per_key()[static_cast<size_t>(k) + 1];
        for (int64_t bag = first; bag < last; ++bag) {
            const int64_t length = offsets[bag + 1] - offsets[bag];
            SR_CHECK(length <= pw.numel(),
                     "PositionWeightedModule: feature '{}' sample {} has {} "
                     "ids, more than its max length {}",
                     features_[static_cast<size_t>(p)], bag - first, length, pw.numel());
            std::copy(pw.data<float>(), pw.data<float>() + length, out + offsets[bag]);
        }
    }
    last_ = features;
    if (features.variable_stride_per_key()) {
        return KeyedJaggedTensor::from_lengths_variable_stride(features.keys(), features.values(),
                                                               features.lengths(),
                                                               features.stride_per_key(), weights);
    }
    return KeyedJaggedTensor::from_offsets_sync(features.keys(), features.values(),
                                                features.offsets(), weights, features.stride());
}

void PositionWeightedModule::backward(const Tensor& grad_weights) {
    SR_CHECK(grad_weights.dtype() == DType::kF32 &&
                 grad_weights.shape() == Shape({last_.values().numel()}),
             "PositionWeightedModule::backward: grad_weights must be f32[{}], got {}",
             last_.values().numel(), grad_weights.str());
    const float* g = grad_weights.data<float>();
    const int64_t* offsets = last_.offsets().data<int64_t>();
    for (Parameter& p : weights_) {
        p.grad.zero_();
    }
    for (int64_t k = 0; k < last_.num_keys(); ++k) {
        const int64_t p = find_index(features_, last_.keys()[static_cast<size_t>(k)]);
        if (p < 0) {
            continue;
        }
        float* grad = weights_[static_cast<size_t>(p)].grad.data<float>();
        const int64_t first = last_.lengths_offset_per_key()[static_cast<size_t>(k)];
        const int64_t last = last_.lengths_offset_per_key()[static_cast<size_t>(k) + 1];
        for (int64_t bag = first; bag < last; ++bag) {
            for (int64_t n = offsets[bag]; n < offsets[bag + 1]; ++n) {
                grad[n - offsets[bag]] += g[n];
            }
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
    const int64_t p = find_index(features_, feature);
    SR_CHECK(p >= 0, "PositionWeightedModule: no position weights for feature '{}'", feature);
    return weights_[static_cast<size_t>(p)].value;
}

}  // namespace shardrec
