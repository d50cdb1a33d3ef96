// PositionWeightedModule (TorchRec feature processor): gives the id at position j of a bag of
// feature f the learnable weight pw[f][j], so a weighted EmbeddingBagCollection pools
// sum_j pw[f][j] * E[id_j]. Position weights start at 1.0 (seed_inventory 18.6).
// One process applies forward() before the collection. A sharded collection splits it as TorchRec
// does (bucketize_pos): the positions travel with the ids through the input dist as KJT weights
// (with_positions), and the rank that looks the ids up turns them into weights (weights_at) and
// sends the weight gradients back into the replicated position weights (accumulate_grad).
// Letters: F keys, B batch, N ids.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/modules/embedding_config.h"
#include "engine/modules/module.h"
#include "engine/sparse/keyed_jagged_tensor.h"

namespace shardrec {

class PositionWeightedModule : public Module {
public:
    // feature -> max bag length (TorchRec's truncation size), in parameter order.
    explicit PositionWeightedModule(
        std::vector<std::pair<std::string, int64_t>> max_feature_lengths);

    // The input with weights [N] f32 set: pw[f][j] for the j-th id of each bag of a
    // position-weighted key; other keys keep their weights (1.0 when the input has none). A bag
    // longer than its key's max length is an Error. The weights buffer is reused by the next
    // forward.
    KeyedJaggedTensor forward(const KeyedJaggedTensor& features);

    // grad_weights [N] f32: d loss / d the output KJT's weights, e.g.
    // EmbeddingBagCollection::grad_per_sample_weights(). Writes each position weight's grad:
    // the sum over the ids at that position of every bag of its key.
    void backward(const Tensor& grad_weights);

    // "position_weights.<feature>", [max_length] f32 each.
    std::vector<Parameter*> parameters() override;

    const Tensor& position_weight(const std::string& feature) const;

    void reset_parameters();  // every position weight back to 1.0

    // ---- the parts a sharded collection runs on different ranks ----
    // The input with weights [N] f32 (stored in `buffer`, grow-only): for a position-weighted
    // key each id's position j in its bag, for other keys their weights (1.0 without). Checks
    // the bag lengths as forward() does.
    KeyedJaggedTensor with_positions(const KeyedJaggedTensor& features, Tensor& buffer) const;
    // Index of the position weights of `feature`, -1 when it has none.
    int64_t feature_index(const std::string& feature) const;
    // out[i] = pw[p][positions[i]] for n positions of feature index p.
    void weights_at(int64_t p, const float* positions, int64_t n, float* out) const;
    // grad of pw[p][positions[i]] += scale * grad[i], for n positions of feature index p.
    void accumulate_grad(
        int64_t p, const float* positions, const float* grad, int64_t n, float scale = 1.0f);
    void zero_grad();

private:
    std::vector<std::string> features_;
    std::vector<Parameter> weights_;
    KeyedJaggedTensor positions_;  // the latest forward's input, positions as weights
    Tensor positions_buffer_, weights_buffer_;
};

// The position weights of the features of every table with position_weights > 0, in table then
// feature order; nullptr when there are none.
std::unique_ptr<PositionWeightedModule> make_position_weighted_module(
    const std::vector<EmbeddingBagConfig>& tables);

}  // namespace shardrec
