// PositionWeightedModule (TorchRec feature processor): gives the id at position j of a bag of
// feature f the learnable weight pw[f][j], so a weighted EmbeddingBagCollection pools
// sum_j pw[f][j] * E[id_j]. Position weights start at 1.0 (seed_inventory 18.6).
// Letters: F keys, B batch, N ids.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/modules/module.h"
#include "engine/sparse/keyed_jagged_tensor.h"

namespace shardrec {

class PositionWeightedModule : public Module {
public:
    // feature -> max bag length (TorchRec's truncation size), in parameter order.
    explicit PositionWeightedModule(
        std::vector<std::pair<std::string, int64_t>> max_feature_lengths);

    // The input with weights [N] f32 set: pw[f][j] for the j-th id of each bag of a
    // position-weighted key, 1.0 for keys without position weights (existing weights are
    // replaced). A bag longer than its key's max length is an Error. The weights buffer is reused
    // by the next forward.
    KeyedJaggedTensor forward(const KeyedJaggedTensor& features);

    // grad_weights [N] f32: d loss / d the output KJT's weights, e.g.
    // EmbeddingBagCollection::grad_per_sample_weights(). Writes each position weight's grad:
    // the sum over the ids at that position of every bag of its key.
    void backward(const Tensor& grad_weights);

    // "position_weights.<feature>", [max_length] f32 each.
    std::vector<Parameter*> parameters() override;

    const Tensor& position_weight(const std::string& feature) const;

    void reset_parameters();  // every position weight back to 1.0

private:
    std::vector<std::string> features_;
    std::vector<Parameter> weights_;
    KeyedJaggedTensor last_;  // the latest forward's input (its offsets drive backward)
    Tensor weights_buffer_;
};

}  // namespace shardrec
