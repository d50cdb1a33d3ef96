// Float64 reference of the DLRM dot interaction (the judge of kernels/dot_interaction.h). Pair
// (i, j), i > j, of T_0 = dense, T_k = emb_k sits at column D + i(i-1)/2 + j.
// Letters: B batch, F embeddings, D dim.
#pragma once

#include <cstdint>
#include <vector>

#include "test/reference/linear.h"

namespace shardrec::ref {

// dense [B, D], sparse [B, F*D] -> out [B, D + (F+1)F/2]. Chain: D.
DenseValues dot_interaction_forward(const std::vector<double>& dense,
                                    const std::vector<double>& sparse,
                                    int64_t B,
                                    int64_t F,
                                    int64_t D);

struct DotInteractionGrads {
    DenseValues grad_dense;   // [B, D],   chain F + 1
    DenseValues grad_sparse;  // [B, F*D], chain F + 1
};

DotInteractionGrads dot_interaction_backward(const std::vector<double>& dense,
                                             const std::vector<double>& sparse,
                                             const std::vector<double>& grad_out,
                                             int64_t B,
                                             int64_t F,
                                             int64_t D);

}  // namespace shardrec::ref
