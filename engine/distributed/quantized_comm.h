// Collectives over quantized values (TorchRec QuantizedCommCodecs): the f32 rows are encoded
// (kernels/qcomm_codec.h) into bytes, the bytes travel, and the receiver decodes them to f32.
// Where a collective sums (reduce-scatter, all-reduce), the sum is taken after decoding, in f32
// and in rank order, since MPI cannot add fp16, bf16 or fp8: the encoded blocks travel through an
// all-to-all and each rank adds the decoded blocks it received. The result is deterministic and,
// for the all-reduce, bitwise the same on every rank. A row is one row of the [rows, cols] input
// (for fp8, the unit of one scale).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "kernels/qcomm_codec.h"

namespace shardrec {

// A caller's buffers for one quantized collective: grown to the largest size seen, never shrunk,
// so a step of a seen size allocates nothing.
struct QuantizedBuffers {
    Tensor send, recv, decoded;
    Tensor mean;  // quantized_all_reduce_mean's chunk
};

// A 1-D u8 view of the first `bytes` of buf on `device`, which grows (never shrinks) when too
// small.
Tensor reuse_byte_buffer(Tensor& buf, int64_t bytes, Device device);

// A posted collective and the step that turns its received bytes into the f32 result (call it
// after work.wait()); bytes_sent: the bytes this rank sends to the other ranks.
struct QuantizedCollective {
    comm::Work work;
    std::function<void()> finish;
    int64_t bytes_sent = 0;
};

// Reduce-scatter as an all-to-all of encoded blocks: input [sum rows_per_rank, cols] f32, block r
// (rows_per_rank[r] rows) for rank r; out [rows_per_rank[me], cols] f32 gets
// decode(block me of rank 0) + decode(block me of rank 1) + ... in f32. input's writers must be
// done; the encode runs on `stream` and is finished before the collective is posted.
QuantizedCollective quantized_reduce_scatter(comm::ProcessGroup& pg,
                                             const Tensor& input,
                                             const std::vector<int64_t>& rows_per_rank,
                                             kernels::CommType type,
                                             Tensor out,
                                             QuantizedBuffers& buffers,
                                             Stream& stream);

// All-gather of encoded rows: input [rows_per_rank[me], cols] f32 -> out [sum rows_per_rank, cols]
// f32, rank r's decoded rows at block r.
QuantizedCollective quantized_all_gather(comm::ProcessGroup& pg,
                                         const Tensor& input,
                                         const std::vector<int64_t>& rows_per_rank,
                                         kernels::CommType type,
                                         Tensor out,
                                         QuantizedBuffers& buffers,
                                         Stream& stream);

// The mean over ranks of `flat` (f32, 1-D), in place and blocking: chunk r of every rank goes to
// rank r encoded (a reduce-scatter as above), which adds the decoded chunks in f32, divides by
// the world size, and encodes the mean once more for an all-gather that every rank decodes. Two
// roundings of `type` (one of each value, one of the mean), the same bits on every rank.
void quantized_all_reduce_mean(comm::ProcessGroup& pg,
                               Tensor& flat,
                               kernels::CommType type,
                               QuantizedBuffers& buffers,
                               Stream& stream);

}  // namespace shardrec
