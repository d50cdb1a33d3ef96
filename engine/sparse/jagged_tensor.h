// JaggedTensor: one feature's variable-length bags for a batch, in TorchRec's layout. values hold
// every bag back to back; lengths[b] is the size of bag b and offsets = [0, cumsum(lengths)], so
// bag b is values[offsets[b] : offsets[b+1]]. Optional weights are parallel to values. Both lengths
// and offsets are always materialised, so either can be read without work.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace shardrec {

// offsets [n+1] i64 = [0, cumsum(lengths)] of lengths [n] i64 (host tensors). Does not validate.
// With a buffer, the offsets are a prefix view of it (grow_prefix) instead of a new tensor.
Tensor offsets_from_lengths(const Tensor& lengths, Tensor* buffer = nullptr);
// lengths [n] i64 = offsets[i+1] - offsets[i] of offsets [n+1] i64 (host tensors). Does not
// validate.
Tensor lengths_from_offsets(const Tensor& offsets);

class JaggedTensor {
public:
    JaggedTensor() = default;  // empty: no samples, no values

    // values: [N] or [N, ...] of any dtype (ids are i64; EmbeddingCollection outputs f32 [N, D]),
    // lengths [B] i64, weights [N] f32 or absent. Host tensors. Validates (see validate()).
    static JaggedTensor from_lengths(Tensor values,
                                     Tensor lengths,
                                     std::optional<Tensor> weights = std::nullopt);
    // offsets [B+1] i64 with offsets[0] == 0, nondecreasing, offsets[B] == N.
    static JaggedTensor from_offsets(Tensor values,
                                     Tensor offsets,
                                     std::optional<Tensor> weights = std::nullopt);
    // From per-sample lists (tests, tools): i64 values; weights, if given, must match bag by bag.
    static JaggedTensor from_dense(const std::vector<std::vector<int64_t>>& values,
                                   const std::vector<std::vector<float>>* weights = nullptr);

    const Tensor& values() const { return values_; }

    const Tensor& lengths() const { return lengths_; }

    const Tensor& offsets() const { return offsets_; }

    bool has_weights() const { return weights_.has_value(); }

    // TorchRec: weights() throws when the feature is unweighted; weights_or_none() never throws.
    const Tensor& weights() const;

    const std::optional<Tensor>& weights_or_none() const { return weights_; }

    int64_t num_samples() const { return lengths_.defined() ? lengths_.numel() : 0; }

    int64_t num_values() const { return values_.defined() ? values_.size(0) : 0; }

    // Per-sample value lists: to_dense()[b] = values of bag b. Needs 1-D i64 values on the host.
    std::vector<std::vector<int64_t>> to_dense() const;
    // Per-sample weight lists; throws when unweighted.
    std::vector<std::vector<float>> to_dense_weights() const;

    // A copy with every tensor on `device`.
    JaggedTensor to(Device device) const;

    // Throws (naming the sample) unless: lengths >= 0, offsets consistent with lengths,
    // sum(lengths) == N, weights f32 [N]. Host tensors only.
    void validate() const;

    // "JaggedTensor([[5], [7, 1]])" for 1-D i64 values; otherwise a shape summary.
    std::string str() const;

private:
    // Takes already-consistent tensors (KeyedJaggedTensor::to_dict builds views this way).
    JaggedTensor(Tensor values, Tensor lengths, Tensor offsets, std::optional<Tensor> weights)
        : values_(std::move(values)),
          lengths_(std::move(lengths)),
          offsets_(std::move(offsets)),
          weights_(std::move(weights)) {}

    friend class KeyedJaggedTensor;

    Tensor values_;
    Tensor lengths_;                 // [B] i64
    Tensor offsets_;                 // [B+1] i64
    std::optional<Tensor> weights_;  // [N] f32
};

}  // namespace shardrec
