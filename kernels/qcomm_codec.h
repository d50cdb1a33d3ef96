// Quantized communication codecs (TorchRec QuantizedCommCodecs): the f32 rows a collective sends
// are encoded to fp16, bf16 or fp8 before it and decoded to f32 after it, so the wire carries 2
// or about 1 byte per value. Only the transfer is quantized: sums of encoded values are taken in
// f32 after decoding (engine/distributed/pooled_embeddings.cpp, quantized_all_reduce.cpp).
//   fp16, bf16   each value rounded to nearest even; no scale (row_bytes = 2 * cols)
//   fp8          OCP FP8 E4M3FN (max 448, no infinities) with one f32 scale per row, amax / 448,
//                stored after the row's cols codes (row_bytes = cols + 4), as TorchRec's FP8
//                codec keeps a per-row scale. What a row is, is the caller's choice: the pooled
//                collectives make it one sample's columns of one rank's block.
// Errors (|decoded - x|): fp16 <= 2^-11 |x| (normal range; Inf beyond 65520), bf16 <= 2^-8 |x|,
// fp8 <= 2^-4 amax of the row. NaN stays NaN. fp16 and bf16 keep +-Inf; fp8 has none: NaN and
// +-Inf encode as NaN, and the scale comes from the finite values only, so the rest of the row
// keeps its accuracy. A row of zeros encodes with scale 0 and decodes to zeros; a row whose amax
// is below 448 f32 subnormals (6e-43) has scale 0 and decodes to zeros too.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "engine/core/rng.h"  // SR_HOST_DEVICE
#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

// TorchRec CommType. kFp32 is the identity (the collectives skip the codec for it).
enum class CommType : uint8_t { kFp32, kFp16, kBf16, kFp8 };

const char* comm_type_name(CommType type);              // "fp32", "fp16", "bf16", "fp8"
CommType comm_type_from_name(const std::string& name);  // throws naming the choices

// Bytes of one encoded row of `cols` values (0 for none: an fp8 row of no values has no scale).
int64_t qcomm_row_bytes(CommType type, int64_t cols);

// input [rows, cols] f32 -> encoded u8, at least rows * qcomm_row_bytes(type, cols) bytes (the
// rest is not written), on input's device, in `stream`'s order. Deterministic.
void qcomm_encode(const Tensor& input, CommType type, Tensor& encoded, Stream& stream);

// encoded u8 (rows * qcomm_row_bytes(type, cols) bytes, or more) -> output [rows, cols] f32.
void qcomm_decode(const Tensor& encoded, CommType type, Tensor& output, Stream& stream);

// ---- the FP8 E4M3FN format (host and device) ----

constexpr float kFp8E4m3Max = 448.0f;
constexpr uint8_t kFp8E4m3Nan = 0x7f;

// f32 -> E4M3FN, round to nearest even, saturating at +-448; NaN and +-Inf give NaN.
SR_HOST_DEVICE inline uint8_t float_to_fp8_e4m3(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
    const uint32_t abs_bits = u & 0x7fffffffu;
    if (abs_bits >= 0x7f800000u)
        return kFp8E4m3Nan;
    float a;
    memcpy(&a, &abs_bits, 4);
    if (a >= kFp8E4m3Max)
        return sign | 0x7e;
    if (a < 0x1p-6f) {  // subnormal: m * 2^-9, m in [0, 8] (8 is the smallest normal, 0x08)
        const float q = a * 512.0f;  // exact
        float m = static_cast<float>(static_cast<int>(q));
        const float frac = q - m;
        if (frac > 0.5f || (frac == 0.5f && (static_cast<int>(m) & 1)))
            m += 1.0f;
        return sign | static_cast<uint8_t>(m);
    }
    // Normal: keep 3 of the 23 mantissa bits, rounding the 20 dropped ones to nearest even; a
    // carry moves into the exponent, as it should.
    uint32_t keep = abs_bits >> 20;
    const uint32_t rest = abs_bits & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u)))
        ++keep;
    const uint32_t code = keep - (120u << 3);  // exponent bias 127 -> 7
    return sign | static_cast<uint8_t>(code > 0x7eu ? 0x7eu : code);
}

SR_HOST_DEVICE inline float fp8_e4m3_to_float(uint8_t c) {
    const uint32_t e = (c >> 3) & 0xfu, m = c & 7u;
    float v;
    if (e == 15 && m == 7) {
        const uint32_t nan = 0x7fc00000u;
        memcpy(&v, &nan, 4);
        return v;
    }
    if (e == 0) {
        v = static_cast<float>(m) * 0x1p-9f;
    } else {
        const uint32_t bits = ((e + 120u) << 23) | (m << 20);
        memcpy(&v, &bits, 4);
    }
    return (c & 0x80) ? -v : v;
}

namespace cpu {
void qcomm_encode(const float* input, int64_t rows, int64_t cols, CommType type, uint8_t* out);
void qcomm_decode(const uint8_t* encoded, int64_t rows, int64_t cols, CommType type, float* out);
}  // namespace cpu

namespace cuda {
void qcomm_encode(
    const float* input, int64_t rows, int64_t cols, CommType type, uint8_t* out, Stream& stream);
void qcomm_decode(
    const uint8_t* encoded, int64_t rows, int64_t cols, CommType type, float* out, Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
