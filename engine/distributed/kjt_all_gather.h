// all_gather_kjt: every rank's KeyedJaggedTensor on every rank, in the order one process sees the
// global batch (key, then the samples of rank 0, rank 1, ...), with an optional f32 payload per id
// (the KJT's weights, or a sequence embedding's gradient row) moved with its id. The data_parallel
// paths of the sharded collections gather their batch's ids and gradients with it, so every
// replica applies the update of the global batch, aggregated as one process aggregates it.
// One all_gather_v of the sizes, then the lengths, values and payload in flight together. Host
// tensors (the MPI process group). Letters: F keys, B_r rank r's batch, Bg = sum B_r, N ids of
// all ranks, W payload width.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/tensor.h"
#include "engine/sparse/keyed_jagged_tensor.h"

namespace shardrec {

// Grow-only buffers of all_gather_kjt, kept by its caller: a steady state allocates nothing.
struct KJTAllGatherBuffers {
    Tensor mine, sizes, lengths, values, payload;          // as gathered: [rank][key][b]
    Tensor global_offsets, global_values, global_payload;  // recat: [key][rank][b]
};

// Views into the KJTAllGatherBuffers, valid until their next all_gather_kjt.
struct GatheredKJT {
    std::vector<int64_t> batch_size_per_rank;  // B_r
    int64_t stride = 0;                        // Bg
    Tensor offsets;  // [F * Bg + 1] i64: bag (f, b) is values[offsets[f*Bg+b] : offsets[f*Bg+b+1]]
    Tensor values;   // [N] i64
    Tensor payload;  // [N] or [N, W] f32 (the payload's rank), undefined without one
};

// Collective. kjt: a fixed stride (B_r may differ per rank), the same keys in the same order on
// every rank. payload: null, or one f32 entry ([N_mine]) or row ([N_mine, W], W the same on every
// rank) per value of kjt.
GatheredKJT all_gather_kjt(comm::ProcessGroup& pg,
                           const KeyedJaggedTensor& kjt,
                           const Tensor* payload,
                           KJTAllGatherBuffers& buf);

}  // namespace shardrec
