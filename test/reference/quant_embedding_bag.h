// Float64 reference of the quantized embedding tables (the judge of
// kernels/quant_embedding_bag.h): each stored row decoded from its bytes alone (the layout
// written out again here: fp16 scale and bias in front, codes packed low bits first, rows padded
// to 16 bytes; fp8: f32 scale in front of E4M3FN codes), and the pooled lookup over the decoded
// values in float64.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/pooling_mode.h"
#include "test/reference/embedding_bag.h"

namespace shardrec::ref {

// One stored table: `bits` 32 (f32), 16 (fp16), 8, 4 or 2 (row-wise with scale and bias), or
// fp8 (bits 8, an f32 scale and E4M3FN codes).
struct QuantTable {
    int bits = 32;
    bool fp8 = false;
    int64_t dim = 0;
    int64_t rows = 0;
    std::vector<uint8_t> bytes;  // rows * quant_row_bytes(bits, dim)
};

int64_t quant_row_bytes(int bits, int64_t dim);

// Element d of row r, exactly (code * scale + bias in float64); *mag gets |code * scale| + |bias|
// (|value| for f32, fp16 and fp8): the size of the terms the kernel rounds.
double quant_value(const QuantTable& table, int64_t r, int64_t d, double* mag = nullptr);

// out [B, sum_f D_f]: feature f's columns after those of the features before it;
// out[b, col_f + d] = sum_i s_i * value(row id_i, d), s_i = w_i (/ L for MEAN). The lookup's
// table_offsets and dim are unused (tables come from `tables` through feature_table).
Values quant_embedding_bag_forward(const std::vector<QuantTable>& tables,
                                   const EmbeddingLookup& lookup,
                                   PoolingMode mode);

}  // namespace shardrec::ref
