// Float64 reference of the sequence (non-pooled) embedding lookup, the judge of
// kernels/sequence_embedding.h. Same plain layout as the pooled reference; the fused update is
// ref::fused_optimizer_update on these row gradients.
#pragma once

#include <vector>

#include "test/reference/embedding_bag.h"

namespace shardrec::ref {

// out [N, D]: out[n, :] = weights[row of id n, :]; mag = |value| (a copy).
Values sequence_embedding_forward(const EmbeddingLookup& a, const std::vector<double>& weights);

// grad_out [N, D] (one row per id) summed per touched row, rows ascending.
RowGradients sequence_embedding_row_gradients(const EmbeddingLookup& a,
                                              const std::vector<double>& grad_out);

}  // namespace shardrec::ref
