// Quantized embedding tables for inference (TorchRec's QuantEmbeddingBagCollection, looked up by
// FBGEMM's IntNBitTableBatchedEmbeddingBagsCodegen): row-wise quantize / dequantize, and the
// pooled lookup over tables of mixed types and dims in one call.
//
// Row layout (FBGEMM's inference TBE, split_table_batched_embeddings_ops_inference.py: rows of
// rounded_row_size_in_bytes(D, type, row_alignment=16), split_embedding_weights_with_scale_bias
// taking the scale and bias from the front of each row), little-endian:
//   int8 / int4 / int2  [fp16 scale][fp16 bias][D codes of 8 / 4 / 2 bits][zero padding]
//                       element d is (code_d * scale + bias); int4 packs element 2i in the low
//                       nibble of byte i and 2i+1 in the high one, int2 element 4i+k in bits
//                       2k..2k+1 of byte i (FBGEMM's order). D * bits / 8 rounded up, so any D.
//   fp16                [D fp16 values][zero padding]
//   f32                 [D f32 values][zero padding]
//   fp8                 [f32 scale][D OCP FP8 E4M3FN codes][zero padding]; element d is
//                       e4m3(code_d) * scale in f32. shardrec's layout, not FBGEMM's: FBGEMM's
//                       FP8 inference type (SparseType.FP8) stores D bytes of a configurable
//                       exponent width and bias (fp8_exponent_bits / fp8_exponent_bias) with no
//                       per-row scale, so its rows cannot be read as these (nor these as its).
//                       The scale is f32, not fp16 like the integer types': amax / 448 of a
//                       trained row is often below fp16's normal range (amax < 448 * 2^-14 =
//                       0.027, common for tables initialised to +-1/sqrt(rows)), where an fp16
//                       scale loses bits or flushes to 0. Row bytes are int8's (D + 4); an
//                       fp16 scale would save 16 bytes only where D % 16 is 13 or 14.
// and every row padded with zeros to a multiple of 16 bytes (dim 64 int8: 64 + 4 -> 80, the
// uint8 [rows, 80] buffer of TorchRec's quantized EBC).
//
// Quantization (FBGEMM's FloatToFusedNBitRowwiseQuantizedSBHalf, for every n-bit type including
// int8, so that the codes are rounded with the scale the row stores): bias = fp16(min of the
// row), scale = fp16((max - bias) / (2^bits - 1)), 1 when that is 0 or its inverse overflows;
// code = clamp(lrint((x - bias) / scale), 0, 2^bits - 1), lrint rounding half to even.
// Error per element |dequantize(quantize(x)) - x| <= scale / 2, plus the fp16 rounding of the
// scale and bias: at most 2^-11 (|min| + |max|) more. fp16 rounds to nearest even (2^-11 |x|);
// f32 is kept bitwise. fp8 (kernels/qcomm_codec.h's E4M3FN conversions, the scale in front):
// scale = amax / 448 of the row in f32, so that the row's max |x| maps to E4M3FN's largest
// finite value, 1 when that is 0 or below f32's normal range (amax < 448 * 2^-126: such a row
// decodes to zeros); code = e4m3(x / scale), rounded to nearest even, saturating at +-448.
// Error per element <= 2^-4 |x| (half an ulp of 3 mantissa bits) + 2^-10 scale (half the
// subnormal step 2^-9, for |x / scale| below the smallest normal 2^-6) + 2^-22 |x| (the f32
// divide and multiply, and the saturation of amax / scale rounded above 448). Rows are expected
// finite (a trained table's).
#pragma once

#include <cstdint>
#include <string>

#include "engine/core/pooling_mode.h"
#include "engine/core/rng.h"  // SR_HOST_DEVICE
#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

// FBGEMM SparseType / TorchRec DataType of a quantized table.
// kFp8 is shardrec's own (see above); appended so that the other codes keep their values.
enum class QuantType : uint8_t { kF32, kF16, kInt8, kInt4, kInt2, kFp8 };

// "f32", "fp16", "int8", "int4", "int2", "fp8"
const char* quant_type_name(QuantType type);
QuantType quant_type_from_name(const std::string& name);  // throws naming the choices

constexpr int64_t kQuantRowAlignment = 16;
constexpr int64_t kQuantScaleBiasBytes = 4;  // fp16 scale + fp16 bias of the integer types
constexpr int64_t kQuantFp8ScaleBytes = 4;   // f32 scale of fp8

// 32, 16, 8, 4, 2, 8 (host and device).
SR_HOST_DEVICE inline int quant_type_bits(QuantType type) {
    switch (type) {
        case QuantType::kF32:
            return 32;
        case QuantType::kF16:
            return 16;
        case QuantType::kInt8:
        case QuantType::kFp8:
            return 8;
        case QuantType::kInt4:
            return 4;
        case QuantType::kInt2:
            return 2;
    }
    return 0;
}

// Bytes of one stored row of `dim` values, padding included (host and device).
SR_HOST_DEVICE inline int64_t quant_row_bytes(QuantType type, int64_t dim) {
    const int bits = quant_type_bits(type);
    int64_t bytes = (dim * bits + 7) / 8;
    if (type == QuantType::kFp8)
        bytes += kQuantFp8ScaleBytes;
    else if (bits <= 8)
        bytes += kQuantScaleBiasBytes;
    return (bytes + kQuantRowAlignment - 1) / kQuantRowAlignment * kQuantRowAlignment;
}

// input [rows, D] f32 -> out u8 [rows * quant_row_bytes(type, D)] (CPU). Deterministic.
void quantize_rows(const Tensor& input, QuantType type, Tensor& out, Stream& stream);

// rows u8 [rows * quant_row_bytes(type, D)] -> out [rows, D] f32, each element code * scale +
// bias in f32 (fp8: e4m3(code) * scale) (CPU).
void dequantize_rows(const Tensor& rows, QuantType type, Tensor& out, Stream& stream);

// The pooled lookup (letters as kernels/embedding_bag.h; T tables, F features, B batch):
//   weights            u8 [total bytes]: table t's rows start at byte weights_offsets[t]
//   weights_offsets    i64 [T + 1], non-decreasing; table t holds (weights_offsets[t+1] -
//                      weights_offsets[t]) / quant_row_bytes(type_t, D_t) rows, exactly
//   weights_tys        u8 [T], QuantType of each table
//   D_offsets          i32 [T + 1], D_offsets[0] == 0: table t's dim is D_offsets[t+1] -
//   D_offsets[t] feature_table      i32 [F], the table of each feature (a table may serve several)
//   ids, offsets, per_sample_weights  as embedding_bag_forward (bag j = f*B + b)
// out [B, sum_f D_{table(f)}] f32: feature f's columns start after those of features 0..f-1;
// out[b, col_f + d] = pool over bag f*B + b of w_i * dequantized row(id_i)[d], SUM or MEAN (/ L),
// empty bags give zeros. Accumulation in f32 in id order (CPU: a bag per thread; CUDA: a warp
// per bag, a column per lane): bitwise deterministic. Ids out of range are an Error naming
// feature, sample, id and rows (CUDA: skipped by the kernel and reported at the next embedding
// call on the device, as embedding_bag_forward does). On CUDA every tensor is on the weights'
// device; the table metadata (weights_offsets, weights_tys, D_offsets, feature_table) is copied
// to the host for the argument checks by copies that do not wait for `stream`: metadata written
// on a stream must be complete before the call (QuantEmbeddingBagCollection builds it once).
void quant_embedding_bag_forward(const Tensor& weights,
                                 const Tensor& weights_offsets,
                                 const Tensor& weights_tys,
                                 const Tensor& D_offsets,
                                 const Tensor& feature_table,
                                 const Tensor& ids,
                                 const Tensor& offsets,
                                 const Tensor* per_sample_weights,
                                 PoolingMode mode,
                                 Tensor& out,
                                 Stream& stream);

namespace cuda {
void quant_embedding_bag_forward(const Tensor& weights,
                                 const Tensor& weights_offsets,
                                 const Tensor& weights_tys,
                                 const Tensor& D_offsets,
                                 const Tensor& feature_table,
                                 const Tensor& ids,
                                 const Tensor& offsets,
                                 const Tensor* per_sample_weights,
                                 PoolingMode mode,
                                 Tensor& out,
                                 Stream& stream);
}  // namespace cuda

namespace cpu {
void quantize_rows(const float* input, int64_t rows, int64_t dim, QuantType type, uint8_t* out);
void dequantize_rows(const uint8_t* in, int64_t rows, int64_t dim, QuantType type, float* out);
void quant_embedding_bag_forward(const uint8_t* weights,
                                 const int64_t* weights_offsets,
                                 const uint8_t* weights_tys,
                                 const int32_t* D_offsets,
                                 const int32_t* feature_table,
                                 int64_t num_features,
                                 const int64_t* ids,
                                 const int64_t* offsets,
                                 const float* per_sample_weights,
                                 int64_t batch,
                                 PoolingMode mode,
                                 float* out,
                                 int64_t out_cols);
}  // namespace cpu

}  // namespace shardrec::kernels
