// Scoring's f32 GEMM (kernels::set_row_invariant_gemms): every element of C is one FMA chain over
// k in order, acc = fma(A[i][p], B[p][j], acc) for p = 0 .. K-1 from acc = 0, then acc + beta C.
// Its bits are a function of row i of A and column j of op(B) alone: not of M, of the rows beside
// it, of the thread count, or of the CPU's vector width (a vector FMA lane rounds as the scalar
// fma does). OpenBLAS gives no such promise: its AVX2 kernels (Haswell, Zen) round a row by its
// place in the call and by the threads' shares, so a sample scored in another batch by serve
// differed from predict in its last bits.
//
// Blocked as GotoBLAS does, which the chain allows: k in blocks of kKc (a block's partial sums
// go through C in f32, exactly what the accumulator held), op(B)'s block packed into panels of 16
// columns ([kc][16], zero-padded), rows of A read in place; each thread takes blocks of kMc rows
// x kNc columns and runs a tile of 6 rows x 16 columns in twelve AVX2 accumulators over them,
// the panel in L1 and the rows' block in L2. Row and column tails take the same chains with
// fewer lanes stored; a CPU without FMA runs them with std::fma, the same bits at scalar speed.
// Which thread computes an element, and whether the call is threaded at all, changes nothing.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/linear.h"

namespace shardrec::kernels::cpu {
namespace {

constexpr int kTileRows = 6, kPanel = 16;
constexpr int64_t kKc = 256, kMc = 72, kNc = 128;
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

// How a tile's chains start and end: `first` k block from zero (else from the partial sums in
// C); at the `last`, C = acc + beta * c_old (c_old: C's values before the call).
struct Ends {
    bool first, last;
    float beta;
    const float* c_old;
    int64_t ld_old;
};

// C[0..R)[0..cols) from A's rows at a (stride lda), one packed panel of kc rows of op(B).
template <int R>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* a,
                                                   int64_t lda,
                                                   const float* panel,
                                                   int64_t kc,
                                                   int cols,
                                                   const Ends& e,
                                                   float* c,
                                                   int64_t ldc) {
    // Fully unrolled loops over r, so that the accumulators stay in registers. A whole tile
    // (16 columns) reads and writes C directly; a column tail goes through a padded copy.
    const bool whole = cols == kPanel;
    __m256 acc[R][2];
    alignas(32) float out[R][kPanel] = {};
    if (!e.first && !whole) {
        for (int r = 0; r < R; ++r) {
            for (int j = 0; j < cols; ++j)
                out[r][j] = c[r * ldc + j];
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
        const float* from = !e.first && whole ? c + r * ldc : out[r];
        acc[r][0] = _mm256_loadu_ps(from);
        acc[r][1] = _mm256_loadu_ps(from + 8);
    }
    for (int64_t p = 0; p < kc; ++p) {
        const __m256 b0 = _mm256_loadu_ps(panel + p * kPanel);
        const __m256 b1 = _mm256_loadu_ps(panel + p * kPanel + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
            const __m256 x = _mm256_broadcast_ss(a + r * lda + p);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
    if (whole) {
        // acc + beta * c_old as the scalar tail rounds it: a product, then a sum.
        const bool add_old = e.last && e.beta != 0.0f;
        const __m256 beta = _mm256_set1_ps(e.beta);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
            for (int h = 0; h < 2; ++h) {
                __m256 v = acc[r][h];
                if (add_old)
                    v = _mm256_add_ps(
                        v, _mm256_mul_ps(beta, _mm256_loadu_ps(e.c_old + r * e.ld_old + 8 * h)));
                _mm256_storeu_ps(c + r * ldc + 8 * h, v);
            }
        }
        return;
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
        _mm256_store_ps(out[r], acc[r][0]);
        _mm256_store_ps(out[r] + 8, acc[r][1]);
    }
    for (int r = 0; r < R; ++r) {
        float* row = c + r * ldc;
        const float* old = e.c_old + r * e.ld_old;
        for (int j = 0; j < cols; ++j)
            row[j] = !e.last || e.beta == 0.0f ? out[r][j] : out[r][j] + e.beta * old[j];
    }
}

using TileFn =
    void (*)(const float*, int64_t, const float*, int64_t, int, const Ends&, float*, int64_t);
constexpr TileFn kTiles[kTileRows + 1] = {nullptr,      tile_avx2<1>, tile_avx2<2>, tile_avx2<3>,
                                          tile_avx2<4>, tile_avx2<5>, tile_avx2<6>};

// The same chains with std::fma, for a CPU without AVX2 and FMA.
void tile_scalar(int rows,
                 const float* a,
                 int64_t lda,
                 const float* panel,
                 int64_t kc,
                 int cols,
                 const Ends& e,
                 float* c,
                 int64_t ldc) {
    for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < cols; ++j) {
            float& out = c[r * ldc + j];
            float acc = e.first ? 0.0f : out;
            for (int64_t p = 0; p < kc; ++p)
                acc = std::fma(a[r * lda + p], panel[p * kPanel + j], acc);
            out = !e.last || e.beta == 0.0f ? acc : acc + e.beta * e.c_old[r * e.ld_old + j];
        }
    }
}

bool has_avx2_fma() {
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return yes;
}

}  // namespace

void ordered_sgemm(Trans tb,
                   int64_t m,
                   int64_t n,
                   int64_t k,
                   const float* a,
                   int64_t lda,
                   const float* b,
                   int64_t ldb,
                   float beta,
                   float* c,
                   int64_t ldc) {
    if (m <= 0 || n <= 0)
        return;
    if (k == 0) {  // every chain is empty: 0, plus beta C
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : 0.0f + beta * c[i * ldc + j];
        }
        return;
    }
    const int64_t panels = (n + kPanel - 1) / kPanel;
    // C's values before the call, where its partial sums overwrite them before beta needs them.
    thread_local std::vector<float> packed, c_old;
    const float* old = c;
    int64_t ld_old = ldc;
    if (beta != 0.0f && k > kKc) {
        c_old.resize(static_cast<size_t>(m * n));
        for (int64_t i = 0; i < m; ++i)
            std::copy_n(c + i * ldc, n, c_old.data() + i * n);
        old = c_old.data();
        ld_old = n;
    }
    packed.resize(static_cast<size_t>(panels * std::min(k, kKc) * kPanel));
    float* const bp = packed.data();
    const int64_t row_blocks = (m + kMc - 1) / kMc, col_blocks = (n + kNc - 1) / kNc;
    const bool vector = has_avx2_fma();
#pragma omp parallel if (m * n * k >= kMinParallelMacs)
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        const int64_t kc = std::min(kKc, k - p0);
#pragma omp for schedule(static)
        for (int64_t q = 0; q < panels; ++q) {
            float* panel = bp + q * kc * kPanel;
            const int64_t j0 = q * kPanel, cols = std::min<int64_t>(kPanel, n - j0);
            for (int64_t p = 0; p < kc; ++p) {
                float* dst = panel + p * kPanel;
                for (int64_t j = 0; j < kPanel; ++j) {
                    dst[j] = j >= cols          ? 0.0f
                             : tb == Trans::kNo ? b[(p0 + p) * ldb + j0 + j]
                                                : b[(j0 + j) * ldb + p0 + p];
                }
            }
        }
        const bool first = p0 == 0, last = p0 + kc == k;
#pragma omp for collapse(2) schedule(static)
        for (int64_t rb = 0; rb < row_blocks; ++rb) {
            for (int64_t cb = 0; cb < col_blocks; ++cb) {
                const int64_t i_end = std::min(m, (rb + 1) * kMc);
                const int64_t q_end = std::min(panels, (cb + 1) * (kNc / kPanel));
                for (int64_t q = cb * (kNc / kPanel); q < q_end; ++q) {
                    const int64_t j0 = q * kPanel;
                    const int cols = static_cast<int>(std::min<int64_t>(kPanel, n - j0));
                    const float* panel = bp + q * kc * kPanel;
                    for (int64_t i0 = rb * kMc; i0 < i_end; i0 += kTileRows) {
                        const int rows = static_cast<int>(std::min<int64_t>(kTileRows, i_end - i0));
                        const float* at = a + i0 * lda + p0;
                        float* ct = c + i0 * ldc + j0;
                        const Ends e{first, last, beta, old + i0 * ld_old + j0, ld_old};
                        if (vector)
                            kTiles[rows](at, lda, panel, kc, cols, e, ct, ldc);
                        else
                            tile_scalar(rows, at, lda, panel, kc, cols, e, ct, ldc);
                    }
                }
            }
        }
    }
}

}  // namespace shardrec::kernels::cpu
