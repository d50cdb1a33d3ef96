// bucketize_kjt_before_all2all (TorchRec, row-wise sharding): splits every feature's ids into
// num_buckets contiguous row blocks, one per destination rank, before KJTAllToAll. For id x of a
// feature with block size bs (ceil(E / world), TorchRec's block_sizes):
//   x <  bs * num_buckets: bucket x / bs, new id x % bs (the row inside the shard);
//   x >= bs * num_buckets: bucket x % num_buckets, new id x / num_buckets (fbgemm's rule for ids
//                          past the table, e.g. unhashed ids).
// The output is bucket-major: keys are the F keys once per bucket (index bucket * F + f), lengths
// [num_buckets * F * B] with lengths[(bucket * F + f) * B + b] the part of bag (f, b) in that
// bucket; ids keep their order inside a bag. Host tensors. Letters: F keys, B batch, N ids.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/distributed/kjt_all_to_all.h"
#include "engine/sparse/keyed_jagged_tensor.h"

namespace shardrec {

struct BucketizedKJT {
    // Ready for KJTAllToAll(pg, splits = [F] * num_buckets): keys [num_buckets * F], lengths
    // [num_buckets * F * B], values [N] (new ids), weights [N] f32 (the input's, moved with
    // their ids; the positions instead when bucketize_pos), stride B.
    KJTAllToAllInput features;
    // [N] i64 when output_permute: unbucketize_permute[i] = the bucketized position of input
    // value i, so bucketized[unbucketize_permute[i]] is input value i (TorchRec restores the
    // sequence order with index_select(embeddings, 0, unbucketize_permute)).
    std::optional<Tensor> unbucketize_permute;
};

// Grow-only storage for the output's lengths, values and weights: a caller that passes the same
// buffers again (once it no longer uses the previous output) allocates nothing in steady state.
struct BucketizeBuffers {
    Tensor lengths, values, weights;
};

// kjt: fixed stride (no VBE), ids >= 0. block_sizes: [F], each >= 1. bucketize_pos: the output
// weights are each id's position inside its input bag, as f32 (TorchRec position-weighted
// features; they replace the input weights, as in TorchRec). TorchRec defaults output_permute to
// false; the sequence output needs it, so it is on here unless asked otherwise.
BucketizedKJT bucketize_kjt_before_all2all(const KeyedJaggedTensor& kjt,
                                           int64_t num_buckets,
                                           const std::vector<int64_t>& block_sizes,
                                           bool output_permute = true,
                                           bool bucketize_pos = false,
                                           BucketizeBuffers* buffers = nullptr);

}  // namespace shardrec
