// Embedding table initialisation on the CPU: OpenMP over rows; each row hashes its (seed, table,
// row) prefix once and finishes one hash per column, eight columns at a time in AVX-512 (with DQ's
// 64-bit multiply and u64 -> f64 conversion) where the CPU has it. Every step of the vector path
// is the scalar one's exact operation (integer mixes; then the f64 scale, a subtraction that is
// exact, one rounded product and one rounding to f32), so both write the same bits.
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

bool cpu_has_avx512_dq() {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
void values_avx512(float* out, int64_t c0, int64_t c1, uint64_t prefix, double bound) {
    values_scalar(out, c0, c1, prefix, bound);
}

bool cpu_has_avx512_dq() {
    return false;
}
#endif

// Row `row` of the table into out[0, num_cols): columns col_begin + c.
template <typename T>
void fill_row(T* out, int64_t num_cols, uint64_t row, const EmbeddingInit& p, bool avx512) {
    const uint64_t prefix = rng::hash_prefix(p.key, p.table, row);
    constexpr int64_t kBlock = 64;
    float block[kBlock];
    for (int64_t c = 0; c < num_cols; c += kBlock) {
        const int64_t n = std::min(kBlock, num_cols - c);
        const int64_t vec = avx512 ? n / 8 * 8 : 0;
        const int64_t c0 = p.col_begin + c;
        if (vec > 0) {  // never entered without AVX-512: its set-up is AVX-512 code too
            values_avx512(block, c0, c0 + vec, prefix, p.bound);
        }
        values_scalar(block + vec, c0 + vec, c0 + n, prefix, p.bound);
        for (int64_t j = 0; j < n; ++j) {
            out[c + j] = from_float<T>(block[j]);
        }
    }
}

template <typename T>
void fill(T* out, int64_t num_rows, int64_t num_cols, const EmbeddingInit& p) {
    const bool avx512 = cpu_has_avx512_dq();
    const int64_t n = p.which != nullptr ? p.num_which : num_rows;
#pragma omp parallel for schedule(static) if (n * num_cols > (int64_t{1} << 16))
    for (int64_t i = 0; i < n; ++i) {
        const int64_t r = p.which != nullptr ? p.which[i] : i;
        fill_row(out + r * num_cols, num_cols, static_cast<uint64_t>(p.row_begin + r), p, avx512);
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
