// The CUDA "aggregate duplicates, then update each touched row once" that the pooled and the
// sequence embedding backward share (the CUDA side of kernels/cpu/embedding_bag_update.h). Every
// id becomes a contribution (global row, where its gradient row starts, scale); a CUB radix sort
// of (row key, id index) pairs groups them by row, stably, so each row's ids stay in id order; a
// run-length encode gives one segment per touched row. Each segment is then reduced in id order
// (a warp per row; a hot row, with more than kHotSegmentIds ids, in chunks of kHotChunkIds ids
// summed by blocks of their own and then added in chunk order, or with HotRowUpdate::kBlock in
// one block, its ids split into fixed contiguous slices) and written as a dense gradient or
// updated by the fused optimizer.
// No atomics touch weights or gradients: results are bitwise identical on repeated runs.
#pragma once

#include "kernels/cuda/embedding_lookup.cuh"

namespace shardrec::kernels::cuda {

constexpr int32_t kHotSegmentIds = 32;
constexpr int32_t kHotChunkIds = 256;

// Device pointers into the workspace, valid until the workspace is used again.
struct RowSegments {
    int64_t max_segments = 0;               // N: an upper bound of num_segments, for launch sizes
    int64_t total_rows = 0;                 // sum E; a segment of row total_rows holds the bad ids
    const int32_t* num_segments = nullptr;  // [1] on the device
    const int64_t* rows = nullptr;          // [N] row of segment s (s < num_segments)
    const int32_t* counts = nullptr;        // [N] ids in segment s
    const int32_t* begins = nullptr;        // [N] first sorted position of segment s
    // By sorted position (the ids of a segment are contiguous, so a warp reads them in one go):
    const int64_t* grad_offsets = nullptr;  // [N] where the id's gradient row starts
    const float* scales = nullptr;          // [N] the id's scale
    const int32_t* num_hot = nullptr;       // [1] segments with more than kHotSegmentIds ids
    const int32_t* hot = nullptr;           // [N] their indices (in no particular order)
    // The chunks of the hot segments (HotRowUpdate::kChunked): hot segment h's chunk j is chunk
    // hot_chunk_begin[h] + j, of sorted positions [begin + j C, min(begin + count, (j + 1) C))
    // (C = kHotChunkIds); chunk_hot[c] is its h and hot_partial[c * D, (c + 1) * D) its sum.
    int64_t max_chunks = 0;                    // an upper bound of num_chunks
    const int32_t* num_chunks = nullptr;       // [1]
    const int32_t* hot_chunk_begin = nullptr;  // [N]
    const int32_t* chunk_hot = nullptr;        // [max_chunks]
    float* hot_partial = nullptr;              // [max_chunks, D]
};

// Contributions of a pooled lookup (grad row (b, f) of grad_out [B, F*D], scale w / L for MEAN)
// or of a sequence lookup (grad row n of grad_out [N, D], scale 1), sorted into row segments.
RowSegments sort_contributions(const LookupArgs& a,
                               bool pooled,
                               PoolingMode mode,
                               EmbeddingBackwardWorkspace& workspace,
                               Stream& stream);

// Fused optimizer update of every touched row of weights [sum E, D] and of its state.
void apply_fused_update(const RowSegments& segments,
                        const float* grad,
                        const FusedOptimizerParams& optim,
                        Tensor& weights,
                        Tensor* state1,
                        Tensor* state2,
                        Stream& stream);

// grad_weights [sum E, D]: zeros, then the aggregated gradient of every touched row.
void write_dense_gradient(const RowSegments& segments,
                          const float* grad,
                          Tensor& grad_weights,
                          Stream& stream);

}  // namespace shardrec::kernels::cuda
