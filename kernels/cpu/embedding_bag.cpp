// Pooled embedding lookup, forward, CPU. OpenMP over bags (dynamic chunks); one thread sums a
// bag in id order straight into its output slice, so results do not depend on the thread count.
// The inner loop over D vectorises; rows kPrefetchIds ids ahead are prefetched (random rows of a
// large table are the whole cost). Where the CPU has AVX-512 (and F16C) the rows are converted and
// summed 16 columns to an instruction (pool_bag_avx512), else with AVX2 and F16C 8 columns
// (pool_bag_avx2), chosen at run time; the same bits as the scalar pool_bag. Letters: F features,
// B batch, D dim, N ids.
#include <atomic>

#include "kernels/cpu/embedding_bag_update.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace shardrec::kernels::cpu {
namespace {

using detail::load_f32;

constexpr int64_t kPrefetchIds = 8;
constexpr int64_t kBagsPerChunk = 16;
constexpr int64_t kBlock = 32;                   // columns kept in registers: 8 SSE vectors
constexpr int64_t kMinWorkForThreads = 1 << 14;  // ids * D below which one thread is faster

// Always inlined: GCC deems a function that only prefetches pure, and deletes calls to it.
template <typename Weight>
[[gnu::always_inline]] inline void prefetch_row(const Weight* row, int64_t dim) {
    const char* p = reinterpret_cast<const char*>(row);
    const int64_t bytes = dim * static_cast<int64_t>(sizeof(Weight));
    for (int64_t b = 0; b < bytes; b += 64) {
        __builtin_prefetch(p + b, 0, 0);
    }
}

struct Lookup {
    const int64_t* table_offsets;
    const int32_t* feature_table;
    const int64_t* ids;
    const int64_t* offsets;
    const float* per_sample_weights;  // null when unweighted
    int64_t num_features, batch, dim;
};

// Columns [c0, D) of a bag, accumulated in place in o (fewer than a register block).
template <typename Weight, bool kWeighted>
[[gnu::always_inline]] inline void pool_tail(const Lookup& a,
                                             const Weight* table,
                                             int64_t begin,
                                             int64_t end,
                                             int64_t prefetch_end,
                                             int64_t c0,
                                             float* __restrict o) {
    const int64_t dim = a.dim;
    for (int64_t d = c0; d < dim; ++d) {
        o[d] = 0.f;
    }
    for (int64_t n = begin; n < end; ++n) {
        if (c0 == 0 && n + kPrefetchIds < prefetch_end) {
            prefetch_row(table + a.ids[n + kPrefetchIds] * dim, dim);
        }
        const Weight* __restrict row = table + a.ids[n] * dim;
        const float w = kWeighted ? a.per_sample_weights[n] : 1.f;
        for (int64_t d = c0; d < dim; ++d) {
            o[d] += kWeighted ? w * load_f32(row[d]) : load_f32(row[d]);
        }
    }
}

// Pools bag [begin, end) of one table into o[0:D]. Columns go in blocks of kBlock accumulated in
// registers over the whole bag (a row block is read once, an output written once); the last
// D % kBlock columns accumulate in place. Each element still sums in id order from 0.
template <typename Weight, bool kWeighted>
void pool_bag(const Lookup& a,
              const Weight* table,
              int64_t begin,
              int64_t end,
              int64_t prefetch_end,
              float* __restrict o) {
    const int64_t dim = a.dim;
    auto scale = [&](int64_t n) { return kWeighted ? a.per_sample_weights[n] : 1.f; };
    int64_t c0 = 0;
    for (; c0 + kBlock <= dim; c0 += kBlock) {
        float acc[kBlock] = {};
        for (int64_t n = begin; n < end; ++n) {
            if (c0 == 0 && n + kPrefetchIds < prefetch_end) {
                prefetch_row(table + a.ids[n + kPrefetchIds] * dim, dim);
            }
            const Weight* __restrict row = table + a.ids[n] * dim + c0;
            const float w = scale(n);
            for (int64_t j = 0; j < kBlock; ++j) {
                acc[j] += kWeighted ? w * load_f32(row[j]) : load_f32(row[j]);
            }
        }
        for (int64_t j = 0; j < kBlock; ++j) {
            o[c0 + j] = acc[j];
        }
    }
    if (c0 < dim) {
        pool_tail<Weight, kWeighted>(a, table, begin, end, prefetch_end, c0, o);
    }
}

// ---- AVX-512 path (x86-64 with GCC or Clang; chosen at run time) ----
#if defined(__x86_64__) && defined(__GNUC__)
#define SHARDREC_AVX512_LOADS 1
#define SR_AVX512 __attribute__((target("avx512f,f16c")))
// GCC 12 reports the intrinsics' own _mm512_undefined pass-through operands as uninitialised.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// 16 storage values to fp32, bit for bit load_f32. vcvtph2ps quiets a signalling NaN (sets the
// mantissa's top bit) where load_f32 keeps it: those lanes get the bit cleared again (any sum
// quiets it anyway, but the conversion itself stays exact).
[[gnu::always_inline]] SR_AVX512 inline __m512 load16(const Half* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m512i wide = _mm512_cvtepu16_epi32(h);
    const __mmask16 nan_exp = _mm512_cmpeq_epi32_mask(
        _mm512_and_si512(wide, _mm512_set1_epi32(0x7e00)), _mm512_set1_epi32(0x7c00));
    const __mmask16 snan = _mm512_mask_test_epi32_mask(nan_exp, wide, _mm512_set1_epi32(0x1ff));
    const __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h));
    return _mm512_castsi512_ps(_mm512_mask_xor_epi32(f, snan, f, _mm512_set1_epi32(0x00400000)));
}

[[gnu::always_inline]] SR_AVX512 inline __m512 load16(const BFloat16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

[[gnu::always_inline]] SR_AVX512 inline __m512 load16(const float* p) {
    return _mm512_loadu_ps(p);
}

// Columns [c0, c0 + 16V) of a bag in V registers, each element summed in id order from +0 as
// pool_bag does (a multiply then an add when weighted: no FMA, so the same roundings).
template <int V, typename Weight, bool kWeighted>
[[gnu::always_inline]] SR_AVX512 inline void pool_block16(const Lookup& a,
                                                          const Weight* table,
                                                          int64_t begin,
                                                          int64_t end,
                                                          int64_t prefetch_end,
                                                          int64_t c0,
                                                          float* __restrict o) {
    const int64_t dim = a.dim;
    __m512 acc[V];
    for (int v = 0; v < V; ++v) {
        acc[v] = _mm512_setzero_ps();
    }
    for (int64_t n = begin; n < end; ++n) {
        if (c0 == 0 && n + kPrefetchIds < prefetch_end) {
            prefetch_row(table + a.ids[n + kPrefetchIds] * dim, dim);
        }
        const Weight* row = table + a.ids[n] * dim + c0;
        if constexpr (kWeighted) {
            const __m512 w = _mm512_set1_ps(a.per_sample_weights[n]);
            for (int v = 0; v < V; ++v) {
                acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(w, load16(row + 16 * v)));
            }
        } else {
            for (int v = 0; v < V; ++v) {
                acc[v] = _mm512_add_ps(acc[v], load16(row + 16 * v));
            }
        }
    }
    for (int v = 0; v < V; ++v) {
        _mm512_storeu_ps(o + c0 + 16 * v, acc[v]);
    }
}

// pool_bag with AVX-512: blocks of 64 columns, then of 16, then pool_bag's scalar tail.
template <typename Weight, bool kWeighted>
SR_AVX512 void pool_bag_avx512(const Lookup& a,
                               const Weight* table,
                               int64_t begin,
                               int64_t end,
                               int64_t prefetch_end,
                               float* __restrict o) {
    const int64_t dim = a.dim;
    int64_t c0 = 0;
    for (; c0 + 64 <= dim; c0 += 64) {
        pool_block16<4, Weight, kWeighted>(a, table, begin, end, prefetch_end, c0, o);
    }
    for (; c0 + 16 <= dim; c0 += 16) {
        pool_block16<1, Weight, kWeighted>(a, table, begin, end, prefetch_end, c0, o);
    }
    if (c0 < dim) {
        pool_tail<Weight, kWeighted>(a, table, begin, end, c0 == 0 ? prefetch_end : 0, c0, o);
    }
}

template <typename Weight>
SR_AVX512 void load_f32_avx512(const Weight* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        _mm512_storeu_ps(dst + i, load16(src + i));
    }
}

// 16 values to fp16, bit for bit float_to_half: vcvtps2ph rounds to nearest even, subnormals and
// overflow to infinity included; a NaN becomes float_to_half's quiet NaN (sign | 0x7e00), not
// vcvtps2ph's payload.
[[gnu::always_inline]] SR_AVX512 inline void store16(const float* x, Half* out) {
    const __m512 v = _mm512_loadu_ps(x);
    const __m512i h =
        _mm512_cvtepu16_epi32(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m512i sign =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), _mm512_set1_epi32(0x8000));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i fixed =
        _mm512_mask_or_epi32(h, nan, sign, _mm512_set1_epi32(0x7e00));  // sign | 0x7e00
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(fixed));
}

// 16 values to bf16, bit for bit float_to_bf16: round to nearest even on the bits, a NaN keeps
// its top bits with the quiet bit set.
[[gnu::always_inline]] SR_AVX512 inline void store16(const float* x, BFloat16* out) {
    const __m512i u = _mm512_loadu_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                           _mm512_and_si512(hi, _mm512_set1_epi32(1))),
                          16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i fixed = _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(fixed));
}

template <typename Weight>
SR_AVX512 void store_f32_avx512(const float* src, Weight* dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        store16(src + i, dst + i);
    }
}

// ---- AVX2 path (with F16C): the AVX-512 path's operations on 8 lanes ----
#define SR_AVX2 __attribute__((target("avx2,f16c")))

// 8 storage values to fp32, bit for bit load_f32 (signalling NaNs as load16 keeps them).
[[gnu::always_inline]] SR_AVX2 inline __m256 load8(const Half* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i wide = _mm256_cvtepu16_epi32(h);
    const __m256i nan_exp = _mm256_cmpeq_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x7e00)),
                                               _mm256_set1_epi32(0x7c00));
    const __m256i no_payload = _mm256_cmpeq_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x1ff)),
                                                  _mm256_setzero_si256());
    const __m256i snan = _mm256_andnot_si256(no_payload, nan_exp);
    const __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    return _mm256_castsi256_ps(
        _mm256_xor_si256(f, _mm256_and_si256(snan, _mm256_set1_epi32(0x00400000))));
}

[[gnu::always_inline]] SR_AVX2 inline __m256 load8(const BFloat16* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

[[gnu::always_inline]] SR_AVX2 inline __m256 load8(const float* p) {
    return _mm256_loadu_ps(p);
}

// pool_block16 on 8 lanes: columns [c0, c0 + 8V) of a bag.
template <int V, typename Weight, bool kWeighted>
[[gnu::always_inline]] SR_AVX2 inline void pool_block8(const Lookup& a,
                                                       const Weight* table,
                                                       int64_t begin,
                                                       int64_t end,
                                                       int64_t prefetch_end,
                                                       int64_t c0,
                                                       float* __restrict o) {
    const int64_t dim = a.dim;
    __m256 acc[V];
    for (int v = 0; v < V; ++v) {
        acc[v] = _mm256_setzero_ps();
    }
    for (int64_t n = begin; n < end; ++n) {
        if (c0 == 0 && n + kPrefetchIds < prefetch_end) {
            prefetch_row(table + a.ids[n + kPrefetchIds] * dim, dim);
        }
        const Weight* row = table + a.ids[n] * dim + c0;
        if constexpr (kWeighted) {
            const __m256 w = _mm256_set1_ps(a.per_sample_weights[n]);
            for (int v = 0; v < V; ++v) {
                acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(w, load8(row + 8 * v)));
            }
        } else {
            for (int v = 0; v < V; ++v) {
                acc[v] = _mm256_add_ps(acc[v], load8(row + 8 * v));
            }
        }
    }
    for (int v = 0; v < V; ++v) {
        _mm256_storeu_ps(o + c0 + 8 * v, acc[v]);
    }
}

// pool_bag with AVX2: blocks of 64 columns, then of 8, then pool_bag's scalar tail.
template <typename Weight, bool kWeighted>
SR_AVX2 void pool_bag_avx2(const Lookup& a,
                           const Weight* table,
                           int64_t begin,
                           int64_t end,
                           int64_t prefetch_end,
                           float* __restrict o) {
    const int64_t dim = a.dim;
    int64_t c0 = 0;
    for (; c0 + 64 <= dim; c0 += 64) {
        pool_block8<8, Weight, kWeighted>(a, table, begin, end, prefetch_end, c0, o);
    }
    for (; c0 + 8 <= dim; c0 += 8) {
        pool_block8<1, Weight, kWeighted>(a, table, begin, end, prefetch_end, c0, o);
    }
    if (c0 < dim) {
        pool_tail<Weight, kWeighted>(a, table, begin, end, c0 == 0 ? prefetch_end : 0, c0, o);
    }
}

template <typename Weight>
SR_AVX2 void load_f32_avx2(const Weight* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) {
        _mm256_storeu_ps(dst + i, load8(src + i));
    }
}

// The 8 low 16 bits of 8 32-bit lanes (each < 2^16).
[[gnu::always_inline]] SR_AVX2 inline __m128i narrow8(__m256i x) {
    return _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}

// store16 on 8 lanes.
[[gnu::always_inline]] SR_AVX2 inline void store8(const float* x, Half* out) {
    const __m256 v = _mm256_loadu_ps(x);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i sign =
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16), _mm256_set1_epi32(0x8000));
    const __m128i nan = narrow8(_mm256_srli_epi32(
        _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)), 16));  // 0xffff a NaN lane
    const __m128i fixed = _mm_or_si128(narrow8(sign), _mm_set1_epi16(0x7e00));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_blendv_epi8(h, fixed, nan));
}

[[gnu::always_inline]] SR_AVX2 inline void store8(const float* x, BFloat16* out) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                                           _mm256_and_si256(hi, _mm256_set1_epi32(1))),
                          16);
    // Magnitudes below 2^31 compare alike signed.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i fixed =
        _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), narrow8(fixed));
}

template <typename Weight>
SR_AVX2 void store_f32_avx2(const float* src, Weight* dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) {
        store8(src + i, dst + i);
    }
}

detail::VectorIsa cpu_vector_isa() {
    // Clang 14 has no "f16c" for __builtin_cpu_supports; every CPU with AVX-512F has F16C
    // (Knights Landing on), and every one with AVX2 too (Haswell, Zen on).
#if defined(__clang__)
    if (__builtin_cpu_supports("avx512f"))
        return detail::VectorIsa::kAvx512;
    return __builtin_cpu_supports("avx2") ? detail::VectorIsa::kAvx2 : detail::VectorIsa::kNone;
#else
    if (__builtin_cpu_supports("f16c")) {
        if (__builtin_cpu_supports("avx512f"))
            return detail::VectorIsa::kAvx512;
        if (__builtin_cpu_supports("avx2"))
            return detail::VectorIsa::kAvx2;
    }
    return detail::VectorIsa::kNone;
#endif
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
detail::VectorIsa cpu_vector_isa() {
    return detail::VectorIsa::kNone;
}
#endif

std::atomic<bool> g_force_scalar{false};

template <typename Weight, bool kWeighted, PoolingMode kMode>
void forward_typed(const Lookup& a, const Weight* weights, float* out) {
    const int64_t num_bags = a.num_features * a.batch;
    const int64_t dim = a.dim;
    const int64_t work = a.offsets[num_bags] * dim;
    [[maybe_unused]] const detail::VectorIsa isa = detail::vector_isa();
    // Dynamic chunks: a thread the OS preempts holds up at most one chunk, not half the bags.
#pragma omp parallel for schedule(dynamic, kBagsPerChunk) if (work >= kMinWorkForThreads)
    for (int64_t j = 0; j < num_bags; ++j) {
        const int64_t f = j / a.batch;
        const int64_t b = j % a.batch;
        const Weight* table = weights + a.table_offsets[a.feature_table[f]] * dim;
        const int64_t feature_end = a.offsets[(f + 1) * a.batch];    // prefetch stays in the table
        float* __restrict o = out + (b * a.num_features + f) * dim;  // out[b, f*D : (f+1)*D]
        const int64_t begin = a.offsets[j];
        const int64_t end = a.offsets[j + 1];
#ifdef SHARDREC_AVX512_LOADS
        if (isa == detail::VectorIsa::kAvx512) {
            pool_bag_avx512<Weight, kWeighted>(a, table, begin, end, feature_end, o);
        } else if (isa == detail::VectorIsa::kAvx2) {
            pool_bag_avx2<Weight, kWeighted>(a, table, begin, end, feature_end, o);
        } else {
            pool_bag<Weight, kWeighted>(a, table, begin, end, feature_end, o);
        }
#else
        pool_bag<Weight, kWeighted>(a, table, begin, end, feature_end, o);
#endif
        if constexpr (kMode == PoolingMode::kMean) {
            if (end > begin) {
                const auto length = static_cast<float>(end - begin);
                for (int64_t d = 0; d < dim; ++d) {
                    o[d] /= length;
                }
            }
        }
    }
}

}  // namespace

namespace detail {

VectorIsa vector_isa() {
    static const VectorIsa supported = cpu_vector_isa();
    return g_force_scalar.load(std::memory_order_relaxed) ? VectorIsa::kNone : supported;
}

bool vector_loads() {
    return vector_isa() != VectorIsa::kNone;
}

void force_scalar_loads(bool scalar) {
    g_force_scalar.store(scalar);
}

template <typename Weight>
void load_f32_vector_typed(const Weight* src, float* dst, int64_t n) {
    SR_CHECK(vector_loads() && n % 16 == 0, "load_f32_vector: {} values, on a CPU {} AVX2 and F16C",
             n, vector_loads() ? "with" : "without");
#ifdef SHARDREC_AVX512_LOADS
    if (vector_isa() == VectorIsa::kAvx512)
        load_f32_avx512(src, dst, n);
    else
        load_f32_avx2(src, dst, n);
#else
    (void)src;
    (void)dst;
#endif
}

void load_f32_vector(const Half* src, float* dst, int64_t n) {
    load_f32_vector_typed(src, dst, n);
}

void load_f32_vector(const BFloat16* src, float* dst, int64_t n) {
    load_f32_vector_typed(src, dst, n);
}

template <typename Weight>
void store_f32_vector_typed(const float* src, Weight* dst, int64_t n) {
    SR_CHECK(vector_loads() && n % 16 == 0,
             "store_f32_vector: {} values, on a CPU {} AVX2 and F16C", n,
             vector_loads() ? "with" : "without");
#ifdef SHARDREC_AVX512_LOADS
    if (vector_isa() == VectorIsa::kAvx512)
        store_f32_avx512(src, dst, n);
    else
        store_f32_avx2(src, dst, n);
#else
    (void)src;
    (void)dst;
#endif
}

void store_f32_vector(const float* src, Half* dst, int64_t n) {
    store_f32_vector_typed(src, dst, n);
}

void store_f32_vector(const float* src, BFloat16* dst, int64_t n) {
    store_f32_vector_typed(src, dst, n);
}

}  // namespace detail

void embedding_bag_forward(const Tensor& weights,
                           const Tensor& table_offsets,
                           const Tensor& feature_table,
                           const Tensor& ids,
                           const Tensor& offsets,
                           const Tensor* per_sample_weights,
                           PoolingMode mode,
                           Tensor& out) {
    const int64_t num_features = feature_table.numel();
    const Lookup a{table_offsets.data<int64_t>(),
                   feature_table.data<int32_t>(),
                   ids.data<int64_t>(),
                   offsets.data<int64_t>(),
                   per_sample_weights ? per_sample_weights->data<float>() : nullptr,
                   num_features,
                   (offsets.numel() - 1) / num_features,
                   weights.size(1)};
    float* o = out.data<float>();
    visit_float_dtype(weights.dtype(), [&](auto tag) {
        using Weight = typename decltype(tag)::type;
        const Weight* w = weights.data<Weight>();
        const bool weighted = a.per_sample_weights != nullptr;
        if (mode == PoolingMode::kSum) {
            weighted ? forward_typed<Weight, true, PoolingMode::kSum>(a, w, o)
                     : forward_typed<Weight, false, PoolingMode::kSum>(a, w, o);
        } else {
            weighted ? forward_typed<Weight, true, PoolingMode::kMean>(a, w, o)
                     : forward_typed<Weight, false, PoolingMode::kMean>(a, w, o);
        }
    });
}

}  // namespace shardrec::kernels::cpu
