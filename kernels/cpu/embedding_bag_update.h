// CPU internals shared by the embedding backwards (pooled and sequence), so there is one
// implementation of "aggregate duplicates, then update each touched row once": every id becomes
// a contribution (global row, where its gradient row starts, scale); contributions are sorted by
// row (stable LSD radix sort, so duplicates keep id order); each touched row is then reduced in
// id order by one thread and either written as a dense gradient or updated by the fused
// optimizer. Deterministic whatever the thread count.
#pragma once

#include <cstdint>

#include "kernels/embedding_bag.h"

namespace shardrec::kernels::cpu::detail {

// Id n adds scales[n] * grad[grad_offsets[n] + d] to row rows[n], for d in [0, D).
// The arrays live in the workspace (slots 0..2).
struct RowContributions {
    int64_t count = 0;
    int64_t* rows = nullptr;
    int64_t* grad_offsets = nullptr;
    float* scales = nullptr;
};

// Contributions sorted by row: segment s covers order[begin[s] : begin[s+1]] (indices into the
// contributions, ascending within a segment) and updates row rows_sorted[begin[s]].
struct RowSegments {
    int64_t num_segments = 0;
    const int64_t* begin = nullptr;
    const int64_t* order = nullptr;
    const uint64_t* rows_sorted = nullptr;
};

int max_threads();

RowContributions alloc_contributions(int64_t count, EmbeddingBackwardWorkspace& workspace);

// num_rows bounds every row (sum E); it sets the number of radix passes.
RowSegments sort_by_row(const RowContributions& c, int64_t num_rows,
                        EmbeddingBackwardWorkspace& workspace);

// Fused optimizer update of every touched row of weights [sum E, D] (and its state).
void apply_fused_update(const RowContributions& c, const RowSegments& segments, const float* grad,
                        const FusedOptimizerParams& optim, Tensor& weights, Tensor* state1,
                        Tensor* state2, EmbeddingBackwardWorkspace& workspace);

// grad_weights [sum E, D] f32: zeros, then the aggregated gradient of every touched row.
void write_dense_gradient(const RowContributions& c, const RowSegments& segments,
                          const float* grad, Tensor& grad_weights);

}  // namespace shardrec::kernels::cpu::detail
