// Embedding table initialisation: TorchRec's default, uniform in [-sqrt(1/E), +sqrt(1/E)] for a
// table of E rows, with every value a pure function of (seed, table, row, column). Any shard on
// any rank and device regenerates exactly the values of the unsharded table, so plans and world
// sizes start from the same rows (ARCHITECTURE.md, sharding invariance), and a device fills its
// tables itself instead of copying them from the host.
#pragma once

#include <cstdint>

#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

// Keeps the init stream apart from other users of rng::hash(seed, ...).
constexpr uint64_t kEmbeddingInitSalt = 0x656d625f696e6974ull;  // "emb_init"

// Value (row, col) of table `table` from its hash bits rng::hash(seed ^ kEmbeddingInitSalt,
// table, row, col) and bound = sqrt(1 / E): (2u - 1) * bound in f64 with u = uniform01(bits),
// rounded to f32. Every step is exact but the product and the rounding, so the CPU and CUDA
// backends give the same bits.
SR_HOST_DEVICE inline float embedding_init_from_bits(uint64_t bits, double bound) {
    return static_cast<float>((2.0 * rng::uniform01(bits) - 1.0) * bound);
}

// One value, the definition the fills below follow.
float embedding_init_value(
    uint64_t seed, int64_t table, int64_t row, int64_t col, int64_t num_embeddings);

// Fills table rows [row_begin, row_begin + R) and columns [col_begin, col_begin + C):
//   rows            [R, C] f32 | f16 | bf16, contiguous, on any device;
//                   rows[r, c] = embedding_init_value(seed, table, row_begin + r, col_begin + c,
//                   num_embeddings), rounded to nearest even in the storage dtype
//   table           >= 0; row_begin, col_begin >= 0
//   num_embeddings  E of the whole table, > 0
//   which           null: every row r; else i64 [N] on rows' device, contiguous: only the rows
//                   r = which[i] are written (the others stay as they are), each in [0, R)
//                   (checked on the CPU; the CUDA kernel skips others), repeats allowed. Resets
//                   rows in place (managed collision's evicted rows) without a copy a row.
void embedding_init(Tensor& rows,
                    uint64_t seed,
                    int64_t table,
                    int64_t row_begin,
                    int64_t col_begin,
                    int64_t num_embeddings,
                    Stream& stream,
                    const Tensor* which = nullptr);

// The fill as the backends take it.
struct EmbeddingInit {
    uint64_t key = 0;  // seed ^ kEmbeddingInitSalt
    uint64_t table = 0;
    int64_t row_begin = 0, col_begin = 0;
    double bound = 0;                // sqrt(1 / E)
    const int64_t* which = nullptr;  // the rows to write (on the rows' device), or null: all
    int64_t num_which = 0;
};

namespace cpu {
void embedding_init(Tensor& rows, const EmbeddingInit& p);
}  // namespace cpu

namespace cuda {
void embedding_init(Tensor& rows, const EmbeddingInit& p, Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
