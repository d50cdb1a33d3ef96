// permute_sparse_data: reorders jagged data by segments of bags (fbgemm permute_1D_sparse_data
// generalised to segments holding several bags each). This is TorchRec's recat: KJTAllToAll
// receives [source rank][local feature][b] and needs [local feature][source rank][b]; with a
// variable batch per rank each (rank, feature) segment holds that rank's batch size of bags.
// Host tensors. Letters: S segments, N values.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace shardrec {

// Input: S segments back to back, segment k = segment_sizes[k] consecutive bags (lengths
// entries) and their values. Output segment i = input segment permute[i]; permute must be a
// permutation of [0, S).
//   lengths          [sum segment_sizes] i64, each >= 0
//   values           [N, ...] rows of any dtype and width (ids [N] i64, embeddings [N, D] f32)
//   weights          [N] f32, or nullptr
//   permuted_*       preallocated with the same shapes and dtypes as the inputs (they must not
//                    alias them); permuted_weights is needed exactly when weights is given
// Rows of one bag keep their order. Exact (a copy).
void permute_sparse_data(const std::vector<int64_t>& permute,
                         const std::vector<int64_t>& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights);

// TorchRec _get_recat(local_split, num_splits, stagger): the received segment (r * local_split
// + f, from source rank r, local feature f) that goes to output position i, for output order
// [f][rank in stagger order]. The rank order is [x + (num_splits / stagger) * y for x in
// range(num_splits / stagger) for y in range(stagger)] (stagger 1: 0..num_splits-1). Empty when
// local_split is 0. Examples: (2, 4, 1) -> [0,2,4,6,1,3,5,7], (2, 4, 2) -> [0,4,2,6,1,5,3,7].
std::vector<int64_t> get_recat(int64_t local_split, int64_t num_splits, int64_t stagger = 1);

// The source-rank order of get_recat: element k is the rank whose batch comes k-th in the
// output batch (stagger 1: 0..num_splits-1).
std::vector<int64_t> recat_rank_order(int64_t num_splits, int64_t stagger = 1);

}  // namespace shardrec
