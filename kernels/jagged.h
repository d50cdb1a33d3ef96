// The jagged ops under TorchRec's input dist, with fbgemm_gpu's names and semantics: offsets from
// lengths, the segment permute of KJTAllToAll (TorchRec's recat), and row-wise sharding's
// bucketize before it. Exact (integer counts and copies): every backend gives the same bits.
// Every tensor of a call is on one device: the permute and the block sizes are tensors too, so a
// CUDA call reads no host data and never synchronises. Every entry runs on `stream` (the CPU
// ignores it). Letters: n entries, S segments, N values, F features, B batch, R buckets.
#pragma once

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

// fbgemm asynchronous_complete_cumsum: out[0] = 0, out[i + 1] = out[i] + lengths[i].
//   lengths  [n]      i64 (n may be 0)
//   out      [n + 1]  i64, written
void asynchronous_complete_cumsum(const Tensor& lengths, Tensor& out, Stream& stream);

// fbgemm permute_1D_sparse_data generalised to segments of bags, as
// engine/distributed/permute_sparse_data.h defines it: the input is S segments back to back,
// segment k = segment_sizes[k] consecutive bags (lengths entries) and their values; output
// segment i = input segment permute[i]. Rows of one bag keep their order.
//   permute           [S]                 i64, a permutation of [0, S)
//   segment_sizes     [S]                 i64, each >= 0
//   lengths           [sum segment_sizes] i64, each >= 0, summing to N
//   values            [N, ...]            rows of any dtype and width
//   weights           [N] f32, or nullptr
//   permuted_*        the shapes and dtypes of the inputs, written, not aliasing them;
//                     permuted_weights exactly when weights
// The contents (a permutation, sizes >= 0, lengths >= 0 summing to N) are checked on the CPU;
// on CUDA they are preconditions (broken ones leave output entries unwritten, never write
// outside the outputs).
void permute_sparse_data(const Tensor& permute,
                         const Tensor& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights,
                         Stream& stream);

// fbgemm block_bucketize_sparse_features, as engine/distributed/bucketize.h defines it: splits
// every feature's ids into R contiguous row blocks (one per destination rank). For id x of
// feature f with block size bs = block_sizes[f]:
//   x <  bs * R: bucket x / bs, new id x % bs (the row inside the shard);
//   x >= bs * R: bucket x % R, new id x / R (fbgemm's rule for ids past the table).
// The output is bucket-major, bag (r, f, b) at new_lengths[(r * F + f) * B + b]; ids keep their
// order inside a bag (fbgemm's sequence mode, deterministic on every backend).
//   lengths              [F * B]      i64, feature-major (bag f * B + b), each >= 0, sum N
//   indices              [N]          i64, each >= 0 (checked on the CPU; CUDA reads a negative
//                                     id as unsigned, as fbgemm does: it lands past the table)
//   block_sizes          [F]          i64, each >= 1 (checked on the CPU; CUDA reads < 1 as 1)
//   num_buckets          R >= 1
//   weights              [N] f32, or nullptr: moved with their ids
//   bucketize_pos        new_weights are each id's position inside its input bag, as f32
//                        (they replace the weights; fbgemm returns them as a separate new_pos)
//   new_lengths          [R * F * B]  i64, written
//   new_indices          [N]          i64, written
//   new_weights          [N] f32, written; given exactly when weights or bucketize_pos
//   unbucketize_permute  [N] i64 or nullptr: the output position of input id i, written
void block_bucketize_sparse_features(const Tensor& lengths,
                                     const Tensor& indices,
                                     const Tensor& block_sizes,
                                     int64_t num_buckets,
                                     const Tensor* weights,
                                     bool bucketize_pos,
                                     Tensor& new_lengths,
                                     Tensor& new_indices,
                                     Tensor* new_weights,
                                     Tensor* unbucketize_permute,
                                     Stream& stream);

namespace cpu {

void asynchronous_complete_cumsum(const Tensor& lengths, Tensor& out);
void permute_sparse_data(const Tensor& permute,
                         const Tensor& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights);
void block_bucketize_sparse_features(const Tensor& lengths,
                                     const Tensor& indices,
                                     const Tensor& block_sizes,
                                     int64_t num_buckets,
                                     const Tensor* weights,
                                     bool bucketize_pos,
                                     Tensor& new_lengths,
                                     Tensor& new_indices,
                                     Tensor* new_weights,
                                     Tensor* unbucketize_permute);

}  // namespace cpu

namespace cuda {

void asynchronous_complete_cumsum(const Tensor& lengths, Tensor& out, Stream& stream);
void permute_sparse_data(const Tensor& permute,
                         const Tensor& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights,
                         Stream& stream);
void block_bucketize_sparse_features(const Tensor& lengths,
                                     const Tensor& indices,
                                     const Tensor& block_sizes,
                                     int64_t num_buckets,
                                     const Tensor* weights,
                                     bool bucketize_pos,
                                     Tensor& new_lengths,
                                     Tensor& new_indices,
                                     Tensor* new_weights,
                                     Tensor* unbucketize_permute,
                                     Stream& stream);

}  // namespace cuda

}  // namespace shardrec::kernels
