// Float64 reference of the pooled embedding lookup, its backward and the fused optimizer rules
// (the judge of kernels/embedding_bag.h). Plain loops over std::vector<double>; no engine
// dependency beyond the plain enums of pooling_mode.h and embedding_optimizer.h. Every output
// carries mag = sum of |terms| per element, for the derived tolerance of STYLE.md R3.
// Letters: T tables, F features, B batch, D dim, N ids, U touched rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/pooling_mode.h"
#include "kernels/embedding_optimizer.h"

namespace shardrec::ref {

// The table-batched layout of kernels/embedding_bag.h, as plain vectors.
struct EmbeddingLookup {
    int64_t dim = 0;
    std::vector<int64_t> table_offsets;      // [T+1]
    std::vector<int32_t> feature_table;      // [F]
    std::vector<int64_t> ids;                // [N], local to the feature's table
    std::vector<int64_t> offsets;            // [F*B+1], bag f*B + b
    std::vector<double> per_sample_weights;  // [N], or empty when unweighted

    int64_t num_features() const { return static_cast<int64_t>(feature_table.size()); }

    int64_t batch() const;

    int64_t num_rows() const { return table_offsets.back(); }

    int64_t row_of(int64_t n, int64_t feature) const {
        return table_offsets[static_cast<size_t>(feature_table[static_cast<size_t>(feature)])] +
               ids[static_cast<size_t>(n)];
    }
};

struct Values {
    std::vector<double> value;
    std::vector<double> mag;
};

// out [B, F*D]: out[b, f*D + d] = sum_i s_i * weights[row_i, d], s_i = w_i (/ L for MEAN).
// weights [sum E, D].
Values embedding_bag_forward(const EmbeddingLookup& a,
                             const std::vector<double>& weights,
                             PoolingMode mode);

// The aggregated gradient of every touched row, rows ascending: grad/mag are [U, D].
struct RowGradients {
    std::vector<int64_t> rows;
    std::vector<double> grad;
    std::vector<double> mag;
    int64_t max_count = 0;  // most contributions to one row (the K of the tolerance)
};

// Contributions s_i * grad_out[b, f*D : (f+1)*D] summed per row. grad_out [B, F*D].
RowGradients embedding_bag_row_gradients(const EmbeddingLookup& a,
                                         const std::vector<double>& grad_out,
                                         PoolingMode mode);

// grad_weights [sum E, D] (zero rows where nothing was looked up).
Values embedding_bag_backward(const EmbeddingLookup& a,
                              const std::vector<double>& grad_out,
                              PoolingMode mode);

// d loss / d per_sample_weights [N] = dot(grad_out bag, row) (/ L for MEAN).
Values embedding_bag_backward_per_sample_weights(const EmbeddingLookup& a,
                                                 const std::vector<double>& weights,
                                                 const std::vector<double>& grad_out,
                                                 PoolingMode mode);

// Weights [sum E, D] and optimizer state after one fused update of the touched rows; untouched
// rows and state keep their values (mag = |value|). state1/state2 as in
// kernels/embedding_optimizer.h (empty when the type has none). The mags bound how fp32 errors of
// the aggregated gradient (relative to its own mag) reach each output, derived in the .cpp.
struct OptimizerUpdate {
    Values weights;
    Values state1;
    Values state2;
};

OptimizerUpdate fused_optimizer_update(const RowGradients& grads,
                                       const kernels::FusedOptimizerParams& optim,
                                       int64_t dim,
                                       const std::vector<double>& weights,
                                       const std::vector<double>& state1,
                                       const std::vector<double>& state2);

}  // namespace shardrec::ref
