// Embedding table initialisation on the CPU: OpenMP over rows; each row hashes its (seed, table,
// row) prefix once and finishes one hash per column, eight columns at a time in AVX-512 (with DQ's
// 64-bit multiply and u64 -> f64 conversion) where the CPU has it, else four at a time in AVX2
// (the 64-bit multiply from three 32-bit ones, the 53-bit conversion from two exact halves).
// Every step of the vector paths is the scalar one's exact operation (integer mixes; then the f64
// scale, a subtraction that is exact, one rounded product and one rounding to f32), so all write
// the same bits.
#include "kernels/embedding_init.h"

#include <algorithm>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SHARDREC_INIT_AVX512 1
#endif

namespace shardrec::kernels::cpu {
namespace {

// Values of columns [c0, c1) of a row, as f32.
void values_scalar(float* out, int64_t c0, int64_t c1, uint64_t prefix, double bound) {
    for (int64_t c = c0; c < c1; ++c) {
        out[c - c0] =
            embedding_init_from_bits(rng::hash_suffix(prefix, static_cast<uint64_t>(c)), bound);
    }
}

#ifdef SHARDREC_INIT_AVX512
#define SR_AVX512_DQ __attribute__((target("avx512f,avx512dq")))
#if !defined(__clang__)
// GCC 12's intrinsics headers trip -Wmaybe-uninitialized on their own undefined-vector temporaries.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

[[gnu::always_inline]] SR_AVX512_DQ inline __m512i mix64x8(__m512i x) {
    x = _mm512_add_epi64(x, _mm512_set1_epi64(static_cast<int64_t>(0x9e3779b97f4a7c15ull)));
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)),
                           _mm512_set1_epi64(static_cast<int64_t>(0xbf58476d1ce4e5b9ull)));
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)),
                           _mm512_set1_epi64(static_cast<int64_t>(0x94d049bb133111ebull)));
    return _mm512_xor_si512(x, _mm512_srli_epi64(x, 31));
}

// values_scalar for c1 - c0 a multiple of 8.
SR_AVX512_DQ void values_avx512(float* out, int64_t c0, int64_t c1, uint64_t prefix, double bound) {
    const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i pre = _mm512_set1_epi64(static_cast<int64_t>(prefix));
    const __m512i mult = _mm512_set1_epi64(static_cast<int64_t>(0xa0761d6478bd642full));
    const __m512d scale = _mm512_set1_pd(0x1.0p-53), one = _mm512_set1_pd(1.0);
    const __m512d b = _mm512_set1_pd(bound);
    for (int64_t c = c0; c < c1; c += 8) {
        const __m512i col = _mm512_add_epi64(_mm512_set1_epi64(c), lanes);
        const __m512i bits = mix64x8(_mm512_xor_si512(pre, _mm512_mullo_epi64(col, mult)));
        const __m512d u = _mm512_mul_pd(_mm512_cvtepu64_pd(_mm512_srli_epi64(bits, 11)), scale);
        const __m512d v = _mm512_mul_pd(_mm512_sub_pd(_mm512_add_pd(u, u), one), b);
        _mm256_storeu_ps(out + (c - c0), _mm512_cvtpd_ps(v));
    }
}

#define SR_AVX2 __attribute__((target("avx2")))

// The low 64 bits of x * k in each lane: xl kl + (xh kl + xl kh) 2^32.
[[gnu::always_inline]] SR_AVX2 inline __m256i mullo64x4(__m256i x, uint64_t k) {
    const __m256i kl = _mm256_set1_epi64x(static_cast<int64_t>(k & 0xffffffffu));
    const __m256i kh = _mm256_set1_epi64x(static_cast<int64_t>(k >> 32));
    const __m256i cross =
        _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), kl), _mm256_mul_epu32(x, kh));
    return _mm256_add_epi64(_mm256_mul_epu32(x, kl), _mm256_slli_epi64(cross, 32));
}

[[gnu::always_inline]] SR_AVX2 inline __m256i mix64x4(__m256i x) {
    x = _mm256_add_epi64(x, _mm256_set1_epi64x(static_cast<int64_t>(0x9e3779b97f4a7c15ull)));
    x = mullo64x4(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), 0xbf58476d1ce4e5b9ull);
    x = mullo64x4(_mm256_xor_si256(x, _mm256_srli_epi64(x, 27)), 0x94d049bb133111ebull);
    return _mm256_xor_si256(x, _mm256_srli_epi64(x, 31));
}

// values_scalar for c1 - c0 a multiple of 4.
SR_AVX2 void values_avx2(float* out, int64_t c0, int64_t c1, uint64_t prefix, double bound) {
    const __m256i lanes = _mm256_set_epi64x(3, 2, 1, 0);
    const __m256i pre = _mm256_set1_epi64x(static_cast<int64_t>(prefix));
    // A 53-bit x as a double, exactly: its low 32 bits in the mantissa of 2^52, its high 21 bits
    // in that of 2^84 (worth 2^32 each), the two biases taken off together, then the halves added.
    const __m256i low_bits = _mm256_set1_epi64x(0xffffffffll);
    const __m256i exp52 = _mm256_set1_epi64x(0x4330000000000000ll);
    const __m256i exp84 = _mm256_set1_epi64x(0x4530000000000000ll);
    const __m256d biases = _mm256_set1_pd(0x1.0p84 + 0x1.0p52);
    const __m256d scale = _mm256_set1_pd(0x1.0p-53), one = _mm256_set1_pd(1.0);
    const __m256d b = _mm256_set1_pd(bound);
    for (int64_t c = c0; c < c1; c += 4) {
        const __m256i col = _mm256_add_epi64(_mm256_set1_epi64x(c), lanes);
        const __m256i bits = mix64x4(_mm256_xor_si256(pre, mullo64x4(col, 0xa0761d6478bd642full)));
        const __m256i x = _mm256_srli_epi64(bits, 11);
        const __m256d lo =
            _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(x, low_bits), exp52));
        const __m256d hi = _mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(x, 32), exp84));
        const __m256d xd = _mm256_add_pd(_mm256_sub_pd(hi, biases), lo);
        const __m256d u = _mm256_mul_pd(xd, scale);
        const __m256d v = _mm256_mul_pd(_mm256_sub_pd(_mm256_add_pd(u, u), one), b);
        _mm_storeu_ps(out + (c - c0), _mm256_cvtpd_ps(v));
    }
}

// The widest vector path the CPU has.
enum class InitSimd { kScalar, kAvx2, kAvx512 };

InitSimd init_simd() {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        return InitSimd::kAvx512;
    return __builtin_cpu_supports("avx2") ? InitSimd::kAvx2 : InitSimd::kScalar;
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
enum class InitSimd { kScalar, kAvx2, kAvx512 };

void values_avx512(float* out, int64_t c0, int64_t c1, uint64_t prefix, double bound) {
    values_scalar(out, c0, c1, prefix, bound);
}

void values_avx2(float* out, int64_t c0, int64_t c1, uint64_t prefix, double bound) {
    values_scalar(out, c0, c1, prefix, bound);
}

InitSimd init_simd() {
    return InitSimd::kScalar;
}
#endif

// Row `row` of the table into out[0, num_cols): columns col_begin + c.
template <typename T>
void fill_row(T* out, int64_t num_cols, uint64_t row, const EmbeddingInit& p, InitSimd simd) {
    const uint64_t prefix = rng::hash_prefix(p.key, p.table, row);
    constexpr int64_t kBlock = 64;
    float block[kBlock];
    for (int64_t c = 0; c < num_cols; c += kBlock) {
        const int64_t n = std::min(kBlock, num_cols - c);
        const int64_t c0 = p.col_begin + c;
        // The vector paths are never entered on a CPU without them: their set-up is theirs too.
        int64_t vec = 0;
        if (simd == InitSimd::kAvx512) {
            vec = n / 8 * 8;
            if (vec > 0)
                values_avx512(block, c0, c0 + vec, prefix, p.bound);
        } else if (simd == InitSimd::kAvx2) {
            vec = n / 4 * 4;
            if (vec > 0)
                values_avx2(block, c0, c0 + vec, prefix, p.bound);
        }
        values_scalar(block + vec, c0 + vec, c0 + n, prefix, p.bound);
        for (int64_t j = 0; j < n; ++j) {
            out[c + j] = from_float<T>(block[j]);
        }
    }
}

template <typename T>
void fill(T* out, int64_t num_rows, int64_t num_cols, const EmbeddingInit& p) {
    const InitSimd simd = init_simd();
    const int64_t n = p.which != nullptr ? p.num_which : num_rows;
#pragma omp parallel for schedule(static) if (n * num_cols > (int64_t{1} << 16))
    for (int64_t i = 0; i < n; ++i) {
        const int64_t r = p.which != nullptr ? p.which[i] : i;
        fill_row(out + r * num_cols, num_cols, static_cast<uint64_t>(p.row_begin + r), p, simd);
    }
}

}  // namespace

void embedding_init(Tensor& rows, const EmbeddingInit& p) {
    visit_float_dtype(rows.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        fill(rows.data<T>(), rows.size(0), rows.size(1), p);
    });
}

}  // namespace shardrec::kernels::cpu
