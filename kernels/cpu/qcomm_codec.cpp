// Quantized communication codecs on the CPU: one row at a time (fp8 needs the row's amax first),
// rows in parallel. fp16 and bf16 rows are whole buffers of 2-byte values: where the CPU has
// AVX-512 or AVX2, with F16C (detail::vector_isa(), as the lookups) they convert 16 or 8 values
// an instruction with the bits of float_to_half / float_to_bf16 and their inverses (NaN lanes
// fixed up to the scalar path's; the lookup's and fused update's loads and stores), about 30x
// the scalar conversion. fp8 rows are encoded with AVX-512 only.
#include "kernels/qcomm_codec.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kernels/cpu/embedding_bag_update.h"  // vector_isa, load_f32_vector, store_f32_vector

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SHARDREC_AVX512_CODEC 1
#endif

namespace shardrec::kernels::cpu {
namespace {

constexpr int64_t kParallelValues = int64_t{1} << 16;
constexpr int64_t kBlock = 4096;  // values a thread converts at a time (a multiple of 16)

#ifdef SHARDREC_AVX512_CODEC
#define SR_AVX512 __attribute__((target("avx512f,f16c")))
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// An fp8 row as encode_fp8_row writes it, 16 values an instruction: the amax of the finite
// values (a maximum, in any order the same), x / scale, and float_to_fp8_e4m3's branches as
// selects (its subnormal rounding of q = |x| * 512 < 8 to the nearest even integer as
// (q + 1.5 * 2^23) - 1.5 * 2^23, exact there); the tail of a row as encode_fp8_row.
SR_AVX512 void encode_fp8_row_avx512(const float* x, int64_t cols, uint8_t* out) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const int64_t whole = cols / 16 * 16;
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t j = 0; j < whole; j += 16) {
        const __m512i a = _mm512_and_si512(_mm512_loadu_si512(x + j), abs_mask);
        const __mmask16 finite = _mm512_cmplt_epu32_mask(a, inf);
        vmax = _mm512_mask_max_ps(vmax, finite, vmax, _mm512_castsi512_ps(a));
    }
    float lanes[16];
    _mm512_storeu_ps(lanes, vmax);
    float amax = 0.0f;
    for (const float lane : lanes)
        amax = std::fmax(amax, lane);
    for (int64_t j = whole; j < cols; ++j) {
        if (std::isfinite(x[j]))
            amax = std::fmax(amax, std::fabs(x[j]));
    }
    const float scale = amax / kFp8E4m3Max;
    const __m512 vscale = _mm512_set1_ps(scale);
    const __m512 shift = _mm512_set1_ps(12582912.0f), smallest_normal = _mm512_set1_ps(0x1p-6f);
    for (int64_t j = 0; j < whole; j += 16) {
        const __m512 v = _mm512_loadu_ps(x + j);
        const __mmask16 finite =
            _mm512_cmplt_epu32_mask(_mm512_and_si512(_mm512_castps_si512(v), abs_mask), inf);
        const __m512 q = scale > 0.0f ? _mm512_div_ps(v, vscale)
                                      : _mm512_maskz_div_ps(~finite, v, vscale);  // +0 if finite
        const __m512i u = _mm512_castps_si512(q);
        const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
        const __m512i abs_bits = _mm512_and_si512(u, abs_mask);
        const __m512 a = _mm512_castsi512_ps(abs_bits);
        const __mmask16 sub = _mm512_cmp_ps_mask(a, smallest_normal, _CMP_LT_OQ);
        const __m512 small = _mm512_maskz_mov_ps(sub, a);
        const __m512 rounded = _mm512_sub_ps(
            _mm512_add_ps(_mm512_mul_ps(small, _mm512_set1_ps(512.0f)), shift), shift);
        const __m512i subnormal = _mm512_cvttps_epu32(rounded);
        const __m512i keep = _mm512_srli_epi32(abs_bits, 20);
        const __m512i rest = _mm512_and_si512(abs_bits, _mm512_set1_epi32(0xfffff));
        const __m512i half = _mm512_set1_epi32(0x80000);
        const __mmask16 up = _mm512_cmpgt_epu32_mask(rest, half) |
                             (_mm512_cmpeq_epi32_mask(rest, half) &
                              _mm512_test_epi32_mask(keep, _mm512_set1_epi32(1)));
        const __m512i code =
            _mm512_sub_epi32(_mm512_mask_add_epi32(keep, up, keep, _mm512_set1_epi32(1)),
                             _mm512_set1_epi32(120 << 3));
        const __m512i largest = _mm512_set1_epi32(0x7e);
        __m512i magnitude = _mm512_min_epu32(code, largest);
        magnitude = _mm512_mask_mov_epi32(
            magnitude, _mm512_cmp_ps_mask(a, _mm512_set1_ps(kFp8E4m3Max), _CMP_GE_OQ), largest);
        magnitude = _mm512_mask_mov_epi32(magnitude, sub, subnormal);
        __m512i bytes = _mm512_or_si512(sign, magnitude);
        bytes = _mm512_mask_mov_epi32(bytes, _mm512_cmpge_epu32_mask(abs_bits, inf),
                                      _mm512_set1_epi32(kFp8E4m3Nan));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm512_cvtepi32_epi8(bytes));
    }
    for (int64_t j = whole; j < cols; ++j) {
        const float q = scale > 0.0f || !std::isfinite(x[j]) ? x[j] / scale : 0.0f;
        out[j] = float_to_fp8_e4m3(q);
    }
    std::memcpy(out + cols, &scale, sizeof(float));
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// n values of a 16-bit comm type, in blocks over the threads: the vector conversions for whole
// groups of 16 where the CPU has them, the scalar ones for the rest.
void encode_16bit(const float* x, int64_t n, CommType type, uint8_t* out) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    const bool vector = detail::vector_loads();
#pragma omp parallel for schedule(static) if (n > kParallelValues)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
        int64_t i = begin;
        uint16_t bits[kBlock];
        if (vector) {
            const int64_t whole = (end - begin) / 16 * 16;
            if (type == CommType::kFp16)
                detail::store_f32_vector(x + begin, reinterpret_cast<Half*>(bits), whole);
            else
                detail::store_f32_vector(x + begin, reinterpret_cast<BFloat16*>(bits), whole);
            i += whole;
        }
        for (; i < end; ++i)
            bits[i - begin] =
                type == CommType::kFp16 ? float_to_half(x[i]).bits : float_to_bf16(x[i]).bits;
        std::memcpy(out + 2 * begin, bits, static_cast<size_t>(2 * (end - begin)));
    }
}

void decode_16bit(const uint8_t* in, int64_t n, CommType type, float* y) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    const bool vector = detail::vector_loads();
#pragma omp parallel for schedule(static) if (n > kParallelValues)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
        uint16_t bits[kBlock];
        std::memcpy(bits, in + 2 * begin, static_cast<size_t>(2 * (end - begin)));
        int64_t i = begin;
        if (vector) {
            const int64_t whole = (end - begin) / 16 * 16;
            if (type == CommType::kFp16)
                detail::load_f32_vector(reinterpret_cast<const Half*>(bits), y + begin, whole);
            else
                detail::load_f32_vector(reinterpret_cast<const BFloat16*>(bits), y + begin, whole);
            i += whole;
        }
        for (; i < end; ++i)
            y[i] = type == CommType::kFp16 ? half_to_float(Half{bits[i - begin]})
                                           : bf16_to_float(BFloat16{bits[i - begin]});
    }
}

void encode_fp8_row(const float* x, int64_t cols, uint8_t* out) {
    float amax = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
        if (std::isfinite(x[j]))
            amax = std::fmax(amax, std::fabs(x[j]));
    }
    const float scale = amax / kFp8E4m3Max;
    for (int64_t j = 0; j < cols; ++j) {
        // x / 0 would be NaN or Inf: a zero scale encodes the finite values as 0.
        const float q = scale > 0.0f || !std::isfinite(x[j]) ? x[j] / scale : 0.0f;
        out[j] = float_to_fp8_e4m3(q);
    }
    std::memcpy(out + cols, &scale, sizeof(float));
}

// fp8_e4m3_to_float of every code.
const std::array<float, 256>& fp8_values() {
    static const std::array<float, 256> values = [] {
        std::array<float, 256> v{};
        for (int c = 0; c < 256; ++c)
            v[static_cast<size_t>(c)] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
        return v;
    }();
    return values;
}

void decode_fp8_row(const uint8_t* in, int64_t cols, float* out) {
    float scale;
    std::memcpy(&scale, in + cols, sizeof(float));
    const std::array<float, 256>& values = fp8_values();
    for (int64_t j = 0; j < cols; ++j)
        out[j] = values[in[j]] * scale;
}

}  // namespace

void qcomm_encode(const float* input, int64_t rows, int64_t cols, CommType type, uint8_t* out) {
    if (type == CommType::kFp16 || type == CommType::kBf16)  // rows of 2-byte values, unpadded
        return encode_16bit(input, rows * cols, type, out);
    const int64_t row_bytes = qcomm_row_bytes(type, cols);
    [[maybe_unused]] const bool vector = detail::vector_isa() == detail::VectorIsa::kAvx512;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelValues)
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = input + r * cols;  // x is input[r, :], cols floats
        uint8_t* o = out + r * row_bytes;
        switch (type) {
            case CommType::kFp32:
                std::memcpy(o, x, static_cast<size_t>(row_bytes));
                break;
            case CommType::kFp16:  // encode_16bit
            case CommType::kBf16:
                break;
            case CommType::kFp8:
#ifdef SHARDREC_AVX512_CODEC
                if (vector) {
                    encode_fp8_row_avx512(x, cols, o);
                    break;
                }
#endif
                encode_fp8_row(x, cols, o);
                break;
        }
    }
}

void qcomm_decode(const uint8_t* encoded, int64_t rows, int64_t cols, CommType type, float* out) {
    if (type == CommType::kFp16 || type == CommType::kBf16)
        return decode_16bit(encoded, rows * cols, type, out);
    const int64_t row_bytes = qcomm_row_bytes(type, cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelValues)
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* in = encoded + r * row_bytes;
        float* y = out + r * cols;  // y is out[r, :], cols floats
        switch (type) {
            case CommType::kFp32:
                std::memcpy(y, in, static_cast<size_t>(row_bytes));
                break;
            case CommType::kFp16:  // decode_16bit
            case CommType::kBf16:
                break;
            case CommType::kFp8:
                decode_fp8_row(in, cols, y);
                break;
        }
    }
}

}  // namespace shardrec::kernels::cpu
