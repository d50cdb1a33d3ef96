// SequenceEmbeddingsAllToAll (TorchRec dist_data): the output dist of sequence embeddings
// (EmbeddingCollection, one row per id). The lookup rows are in the KJTAllToAll output's value
// order, [local feature][source rank][b]; they are recat to [source rank][local feature][b] and
// sent back to the rank each id came from, which receives them in the value order of the KJT it
// sent (ordered by destination), then, for row-wise sharding, in its original order through
// unbucketize_permute. Backward is the reverse: the permutation, the all-to-all, the inverse
// recat, divided by the group size when gradient_division() is on (TorchRec All2All_Seq).
// Needs the KJTAllToAll of stagger 1. Buffers are cached: results are reused by the next call of
// the same direction, one forward and one backward in flight. Host f32. Letters: F keys,
// B batch, N ids, D embedding dim.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/tensor.h"
#include "engine/distributed/comm_ops.h"
#include "engine/distributed/kjt_all_to_all.h"

namespace shardrec {

class SequenceEmbeddingsAllToAll {
public:
    // features_per_rank[r]: the keys rank r looks up (the KJTAllToAll splits).
    SequenceEmbeddingsAllToAll(std::shared_ptr<comm::ProcessGroup> pg,
                               std::vector<int64_t> features_per_rank);

    // local_embs  [N_local, D] f32, one row per value of the KJTAllToAll output
    // lengths     that output's lengths, [F_mine * sum B_r] i64
    // splits      that all-to-all's KJTAllToAllSplits (batch sizes, value splits)
    // unbucketize_permute  [N_in] i64 from bucketize_kjt_before_all2all, or nullptr
    // Result [N_in, D] f32: row i is the embedding of value i of the KJT this rank sent (of the
    // KJT before bucketization when unbucketize_permute is given).
    TensorAwaitable start_forward(const Tensor& local_embs,
                                  const Tensor& lengths,
                                  const KJTAllToAllSplits& splits,
                                  const Tensor* unbucketize_permute = nullptr);
    Tensor forward(const Tensor& local_embs,
                   const Tensor& lengths,
                   const KJTAllToAllSplits& splits,
                   const Tensor* unbucketize_permute = nullptr);

    // grad_output [N_in, D] f32 -> [N_local, D] f32 for the latest forward.
    TensorAwaitable start_backward(const Tensor& grad_output);
    Tensor backward(const Tensor& grad_output);

    const std::vector<int64_t>& features_per_rank() const { return features_per_rank_; }

private:
    std::shared_ptr<comm::ProcessGroup> pg_;
    std::vector<int64_t> features_per_rank_;
    // The latest forward: its splits, permutation, dim and the lengths in [rank][feature] order.
    KJTAllToAllSplits splits_;
    std::optional<Tensor> unbucketize_permute_;
    int64_t dim_ = -1;
    Tensor permuted_lengths_;
    Tensor lengths_buf_, send_, recv_, out_;                     // forward
    Tensor grad_send_, grad_recv_, grad_lengths_buf_, grad_in_;  // backward
};

}  // namespace shardrec
