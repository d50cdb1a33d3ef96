// Dot interaction on the CPU: one pass per batch row. The F+1 vectors of a row (D floats each)
// stay in L1/L2 while all P pairs are formed. Backward writes every gradient vector once,
// summing its pair contributions in ascending partner order, a block of columns at a time. Letters
// as in the header.
#include "kernels/dot_interaction.h"

#include "kernels/cpu/avx512_clones.h"

namespace shardrec::kernels::cpu {
namespace {

// Rows below which a call stays on the calling thread. Rows are independent, so threads never
// change results.
constexpr int64_t kMinRowsForThreads = 16;
// Backward columns accumulated in registers over all partners (8 SSE vectors, 2 AVX-512 ones):
// each gradient column block is written once instead of once per partner. The backward is built
// for AVX-512 too; the forward is not (GCC's AVX-512 build of its dot products was 2-3x slower
// than the SSE one, bench/results/cpu-20261127c-avx512-clones).
constexpr int64_t kBlock = 32;

// T_k of row b: k = 0 is the dense vector, k >= 1 the k-th embedding.
inline const float* vec(const float* dense_b, const float* sparse_b, int64_t k, int64_t D) {
    return k == 0 ? dense_b : sparse_b + (k - 1) * D;
}

// Dot product with 8 interleaved partial sums combined in a fixed tree: the compiler can keep
// them in SIMD registers (a single running sum cannot be vectorised without reassociation), and
// the order is the same on every call, so the result is deterministic.
inline float dot(const float* a, const float* b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) {
        for (int k = 0; k < 8; ++k) {
            acc[k] += a[d + k] * b[d + k];
        }
    }
    for (int k = 0; d < n; ++d, ++k) {
        acc[k] += a[d] * b[d];
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace

void dot_interaction_forward(const Tensor& dense, const Tensor& sparse, Tensor& out) {
    const int64_t B = dense.size(0), D = dense.size(1), F = sparse.size(1) / D;
    const int64_t W = D + (F + 1) * F / 2;
    const float* dp = dense.data<float>();
    const float* sp = sparse.data<float>();
    float* op = out.data<float>();
#pragma omp parallel for schedule(static) if (B >= kMinRowsForThreads)
    for (int64_t b = 0; b < B; ++b) {
        const float* dense_b = dp + b * D;       // dense[b, :], D floats
        const float* sparse_b = sp + b * F * D;  // sparse[b, :], F * D floats
        float* out_b = op + b * W;               // out[b, :], W floats
        for (int64_t d = 0; d < D; ++d) {
            out_b[d] = dense_b[d];
        }
        float* pairs = out_b + D;
        for (int64_t i = 1; i <= F; ++i) {
            const float* ti = vec(dense_b, sparse_b, i, D);
            for (int64_t j = 0; j < i; ++j) {
                const float* tj = vec(dense_b, sparse_b, j, D);
                pairs[dot_interaction_pair_index(i, j)] = dot(ti, tj, D);
            }
        }
    }
}

SR_AVX512_CLONES void dot_interaction_backward(const Tensor& dense,
                                               const Tensor& sparse,
                                               const Tensor& grad_out,
                                               Tensor& grad_dense,
                                               Tensor& grad_sparse) {
    const int64_t B = dense.size(0), D = dense.size(1), F = sparse.size(1) / D;
    const int64_t W = D + (F + 1) * F / 2;
    const float* dp = dense.data<float>();
    const float* sp = sparse.data<float>();
    const float* gp = grad_out.data<float>();
    float* gdp = grad_dense.data<float>();
    float* gsp = grad_sparse.data<float>();
#pragma omp parallel for schedule(static) if (B >= kMinRowsForThreads)
    for (int64_t b = 0; b < B; ++b) {
        const float* dense_b = dp + b * D;
        const float* sparse_b = sp + b * F * D;
        const float* gout_b = gp + b * W;  // grad_out[b, :], W floats
        const float* gpairs = gout_b + D;
        for (int64_t i = 0; i <= F; ++i) {
            // grad T_i = [i == 0] grad_out[b, :D] + sum_{j != i} g(max(i,j), min(i,j)) T_j
            float* gi = i == 0 ? gdp + b * D : gsp + b * F * D + (i - 1) * D;
            const float* init = i == 0 ? gout_b : nullptr;
            auto pair_grad = [&](int64_t j) {
                return gpairs[i > j ? dot_interaction_pair_index(i, j)
                                    : dot_interaction_pair_index(j, i)];
            };
            int64_t c0 = 0;
            for (; c0 + kBlock <= D; c0 += kBlock) {
                float acc[kBlock];
                for (int64_t k = 0; k < kBlock; ++k) {
                    acc[k] = init != nullptr ? init[c0 + k] : 0.0f;
                }
                for (int64_t j = 0; j <= F; ++j) {
                    if (j != i) {
                        const float g = pair_grad(j);
                        const float* tj = vec(dense_b, sparse_b, j, D) + c0;
                        for (int64_t k = 0; k < kBlock; ++k) {
                            acc[k] += g * tj[k];
                        }
                    }
                }
                for (int64_t k = 0; k < kBlock; ++k) {
                    gi[c0 + k] = acc[k];
                }
            }
            for (int64_t d = c0; d < D; ++d) {
                gi[d] = init != nullptr ? init[d] : 0.0f;
            }
            for (int64_t j = 0; j <= F && c0 < D; ++j) {
                if (j != i) {
                    const float g = pair_grad(j);
                    const float* tj = vec(dense_b, sparse_b, j, D);
                    for (int64_t d = c0; d < D; ++d) {
                        gi[d] += g * tj[d];
                    }
                }
            }
        }
    }
}

}  // namespace shardrec::kernels::cpu
