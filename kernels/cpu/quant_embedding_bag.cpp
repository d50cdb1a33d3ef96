// Quantized embedding tables on the CPU: rows quantized and dequantized one at a time (rows in
// parallel), bags pooled one per thread.
#include "kernels/quant_embedding_bag.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/core/dtype.h"
#include "kernels/qcomm_codec.h"  // the E4M3FN conversions, shared with the fp8 comm codec

namespace shardrec::kernels::cpu {
namespace {

constexpr int64_t kParallelValues = int64_t{1} << 16;

uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

float load_half(const uint8_t* p) {
    return half_to_float(Half{load_u16(p)});
}

void store_half(uint8_t* p, float x) {
    const uint16_t bits = float_to_half(x).bits;
    std::memcpy(p, &bits, 2);
}

// std::nearbyint of v under the default rounding mode, without a libm call for |v| < 2^22: adding
// and taking away 1.5 * 2^23 leaves v rounded to the nearest integer, ties to even.
float round_even(float v) {
    constexpr float kShift = 12582912.0f;
    return std::fabs(v) < 4194304.0f ? (v + kShift) - kShift : std::nearbyint(v);
}

// Row-wise n-bit quantization (FBGEMM's rounding, see the header): scale and bias in front. The
// min, max and clamps are std::fmin / std::fmax written out (libm calls otherwise; the same bytes
// for every input, NaN, infinities and signed zeros included): the first operand unless the
// second is smaller (larger) or the first is NaN.
void quantize_nbit_row(const float* x, int64_t dim, int bits, uint8_t* out) {
    float lo = x[0], hi = x[0];
    for (int64_t d = 1; d < dim; ++d) {
        const float v = x[d];
        lo = v < lo || lo != lo ? v : lo;
        hi = v > hi || hi != hi ? v : hi;
    }
    const float bias = half_to_float(float_to_half(lo));
    const auto levels = static_cast<float>((1 << bits) - 1);
    float scale = half_to_float(float_to_half((hi - bias) / levels));
    float inverse = 1.0f / scale;
    if (scale == 0.0f || std::isinf(inverse)) {  // a constant row: every code 0
        scale = 1.0f;
        inverse = 1.0f;
    }
    store_half(out, scale);
    store_half(out + 2, bias);
    uint8_t* codes = out + kQuantScaleBiasBytes;
    const int per_byte = 8 / bits;
    for (int64_t d = 0; d < dim; ++d) {
        const float r = round_even((x[d] - bias) * inverse);
        const float above = r > 0.0f ? r : 0.0f;  // NaN: 0
        const auto code = static_cast<uint8_t>(above < levels ? above : levels);
        const auto shift = static_cast<int>(d % per_byte) * bits;
        codes[d / per_byte] |= static_cast<uint8_t>(code << shift);
    }
}

// fp8 row (see the header): f32 scale in front, amax maps to 448.
void quantize_fp8_row(const float* x, int64_t dim, uint8_t* out) {
    float amax = 0.0f;
    for (int64_t d = 0; d < dim; ++d)
        amax = std::fmax(amax, std::fabs(x[d]));
    float scale = amax / kFp8E4m3Max;
    if (!(scale >= std::numeric_limits<float>::min()))  // 0 or subnormal: x / scale would not
        scale = 1.0f;                                   // keep amax at 448
    std::memcpy(out, &scale, sizeof(float));
    uint8_t* codes = out + kQuantFp8ScaleBytes;
    for (int64_t d = 0; d < dim; ++d)
        codes[d] = float_to_fp8_e4m3(x[d] / scale);
}

// Element d of a stored row, in f32: what the lookup pools.
template <QuantType kType>
inline float row_value(const uint8_t* row, int64_t d, float scale, float bias) {
    if constexpr (kType == QuantType::kF32) {
        float v;
        std::memcpy(&v, row + 4 * d, 4);
        return v;
    } else if constexpr (kType == QuantType::kF16) {
        return load_half(row + 2 * d);
    } else if constexpr (kType == QuantType::kFp8) {
        return fp8_e4m3_to_float(row[kQuantFp8ScaleBytes + d]) * scale;
    } else {
        constexpr int kBits = kType == QuantType::kInt8 ? 8 : kType == QuantType::kInt4 ? 4 : 2;
        constexpr int kPerByte = 8 / kBits;
        const uint8_t byte = row[kQuantScaleBiasBytes + d / kPerByte];
        const int code = (byte >> ((d % kPerByte) * kBits)) & ((1 << kBits) - 1);
        return static_cast<float>(code) * scale + bias;
    }
}

template <QuantType kType>
inline void load_scale_bias(const uint8_t* row, float& scale, float& bias) {
    if constexpr (kType == QuantType::kFp8) {
        std::memcpy(&scale, row, sizeof(float));
    } else if constexpr (kType != QuantType::kF32 && kType != QuantType::kF16) {
        scale = load_half(row);
        bias = load_half(row + 2);
    }
}

template <QuantType kType>
void dequantize_row(const uint8_t* row, int64_t dim, float* out) {
    float scale = 0, bias = 0;
    load_scale_bias<kType>(row, scale, bias);
    for (int64_t d = 0; d < dim; ++d)
        out[d] = row_value<kType>(row, d, scale, bias);
}

// acc[d] += w * row[d] for d < dim.
template <QuantType kType>
void accumulate_row(const uint8_t* row, int64_t dim, float w, float* acc) {
    float scale = 0, bias = 0;
    load_scale_bias<kType>(row, scale, bias);
    for (int64_t d = 0; d < dim; ++d)
        acc[d] += w * row_value<kType>(row, d, scale, bias);
}

void accumulate(QuantType type, const uint8_t* row, int64_t dim, float w, float* acc) {
    switch (type) {
        case QuantType::kF32:
            return accumulate_row<QuantType::kF32>(row, dim, w, acc);
        case QuantType::kF16:
            return accumulate_row<QuantType::kF16>(row, dim, w, acc);
        case QuantType::kInt8:
            return accumulate_row<QuantType::kInt8>(row, dim, w, acc);
        case QuantType::kInt4:
            return accumulate_row<QuantType::kInt4>(row, dim, w, acc);
        case QuantType::kInt2:
            return accumulate_row<QuantType::kInt2>(row, dim, w, acc);
        case QuantType::kFp8:
            return accumulate_row<QuantType::kFp8>(row, dim, w, acc);
    }
}

}  // namespace

void quantize_rows(const float* input, int64_t rows, int64_t dim, QuantType type, uint8_t* out) {
    const int64_t row_bytes = quant_row_bytes(type, dim);
#pragma omp parallel for schedule(static) if (rows * dim > kParallelValues)
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = input + r * dim;
        uint8_t* o = out + r * row_bytes;
        std::memset(o, 0, static_cast<size_t>(row_bytes));  // the padding, and the code bits
        switch (type) {
            case QuantType::kF32:
                std::memcpy(o, x, static_cast<size_t>(4 * dim));
                break;
            case QuantType::kF16:
                for (int64_t d = 0; d < dim; ++d)
                    store_half(o + 2 * d, x[d]);
                break;
            case QuantType::kFp8:
                quantize_fp8_row(x, dim, o);
                break;
            default:
                if (dim > 0)
                    quantize_nbit_row(x, dim, quant_type_bits(type), o);
                break;
        }
    }
}

void dequantize_rows(const uint8_t* in, int64_t rows, int64_t dim, QuantType type, float* out) {
    const int64_t row_bytes = quant_row_bytes(type, dim);
#pragma omp parallel for schedule(static) if (rows * dim > kParallelValues)
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = in + r * row_bytes;
        float* o = out + r * dim;
        switch (type) {
            case QuantType::kF32:
                dequantize_row<QuantType::kF32>(row, dim, o);
                break;
            case QuantType::kF16:
                dequantize_row<QuantType::kF16>(row, dim, o);
                break;
            case QuantType::kInt8:
                dequantize_row<QuantType::kInt8>(row, dim, o);
                break;
            case QuantType::kInt4:
                dequantize_row<QuantType::kInt4>(row, dim, o);
                break;
            case QuantType::kInt2:
                dequantize_row<QuantType::kInt2>(row, dim, o);
                break;
            case QuantType::kFp8:
                dequantize_row<QuantType::kFp8>(row, dim, o);
                break;
        }
    }
}

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
                                 int64_t out_cols) {
    std::vector<int64_t> col(static_cast<size_t>(num_features));
    for (int64_t f = 0, c = 0; f < num_features; ++f) {
        col[static_cast<size_t>(f)] = c;
        c += D_offsets[feature_table[f] + 1] - D_offsets[feature_table[f]];
    }
    const int64_t bags = num_features * batch;
#pragma omp parallel for schedule(static) if (bags > 64)
    for (int64_t j = 0; j < bags; ++j) {
        const int64_t f = j / batch, b = j % batch;
        const int32_t t = feature_table[f];
        const auto type = static_cast<QuantType>(weights_tys[t]);
        const int64_t dim = D_offsets[t + 1] - D_offsets[t];
        const int64_t row_bytes = quant_row_bytes(type, dim);
        float* acc = out + b * out_cols + col[static_cast<size_t>(f)];
        std::fill(acc, acc + dim, 0.0f);
        const int64_t begin = offsets[j], end = offsets[j + 1];
        for (int64_t i = begin; i < end; ++i) {
            const float w = per_sample_weights != nullptr ? per_sample_weights[i] : 1.0f;
            accumulate(type, weights + weights_offsets[t] + ids[i] * row_bytes, dim, w, acc);
        }
        if (mode == PoolingMode::kMean && end > begin) {  // divided, as embedding_bag_forward
            const auto length = static_cast<float>(end - begin);
            for (int64_t d = 0; d < dim; ++d)
                acc[d] /= length;
        }
    }
}

}  // namespace shardrec::kernels::cpu
