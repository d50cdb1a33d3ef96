// KeyedTensor (KT): pooled embeddings of several keys side by side, as TorchRec's
// EmbeddingBagCollection returns them. values is [B, sum(D)] with key_dim = 1: key k owns columns
// [offset_per_key()[k], offset_per_key()[k+1]) and length_per_key()[k] = D_k. Letters: B batch,
// D per-key dim.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace shardrec {

class KeyedTensor {
public:
    KeyedTensor() = default;

    // values: [B, sum(length_per_key)] of any dtype (pooled outputs are f32); key_dim must be 1
    // (TorchRec's default and the only layout the engine produces). Keys must be unique.
    KeyedTensor(std::vector<std::string> keys,
                std::vector<int64_t> length_per_key,
                Tensor values,
                int64_t key_dim = 1);

    // Concatenates [B, D_k] host tensors along dim 1 (TorchRec's KeyedTensor.from_tensor_list).
    static KeyedTensor from_tensor_list(std::vector<std::string> keys,
                                        const std::vector<Tensor>& tensors);

    const std::vector<std::string>& keys() const { return keys_; }

    const std::vector<int64_t>& length_per_key() const { return length_per_key_; }

    const std::vector<int64_t>& offset_per_key() const { return offset_per_key_; }  // [K+1]

    const Tensor& values() const { return values_; }

    int64_t key_dim() const { return 1; }

    int64_t batch_size() const { return values_.defined() ? values_.size(0) : 0; }

    int64_t key_index(const std::string& key) const;  // throws if absent

    // key -> [B, D_k] copy, in key order. Host tensors.
    std::vector<std::pair<std::string, Tensor>> to_dict() const;
    Tensor operator[](const std::string& key) const;  // [B, D_k] copy

    // TorchRec KeyedTensor.regroup: for each group of key names, the [B, sum(D over group)]
    // tensor of those keys' columns in group order, searching the KTs in order. All KTs must have
    // the same B. Host tensors.
    static std::vector<Tensor> regroup(const std::vector<KeyedTensor>& keyed_tensors,
                                       const std::vector<std::vector<std::string>>& groups);

    // Keys of all inputs, in order, columns side by side. All inputs have the same B.
    static KeyedTensor concat(const std::vector<KeyedTensor>& keyed_tensors);

private:
    std::vector<std::string> keys_;
    std::vector<int64_t> length_per_key_;
    std::vector<int64_t> offset_per_key_{0};
    Tensor values_;
};

}  // namespace shardrec
