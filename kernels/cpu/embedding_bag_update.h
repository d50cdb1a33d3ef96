// CPU internals shared by the embedding kernels: storage loads, lane-split dot products, and the
// one implementation of "aggregate duplicates, then update each touched row once" that the
// pooled and the sequence backward share. Every id becomes a contribution (global row, where its
// gradient row starts, scale); contributions are sorted by row (LSD radix sort of (row, id
// index) packed in 64 bits, so duplicates keep id order); each touched row is then reduced in id
// order by one thread and either written as a dense gradient or updated by the fused optimizer.
// Deterministic whatever the thread count.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/embedding_bag.h"

namespace shardrec::kernels::cpu::detail {

// Id n adds scales[n] * grad[grad_offsets[n] + d] to row rows[n], for d in [0, D).
// The arrays live in the workspace (slots 0..2).
struct RowContributions {
    int64_t count = 0;
    int64_t* rows = nullptr;
    int64_t* grad_offsets = nullptr;
    float* scales = nullptr;
};

// Contributions sorted by row, each packed as (row << index_bits) | contribution index:
// segment s covers sorted[begin[s] : begin[s+1]], one row, contribution indices ascending.
struct RowSegments {
    int64_t num_segments = 0;
    const int64_t* begin = nullptr;
    const uint64_t* sorted = nullptr;
    int index_bits = 0;

    int64_t row(int64_t k) const { return static_cast<int64_t>(sorted[k] >> index_bits); }

    int64_t index(int64_t k) const {
        return static_cast<int64_t>(sorted[k] & ((uint64_t{1} << index_bits) - 1));
    }
};

int max_threads();

// Storage to fp32, bit for bit what engine/core's to_float gives, but inline and branch-free for
// f16 so the loops over D vectorise (the core's half_to_float is an out-of-line call per element,
// which made f16 lookups 10x slower than bf16). test_embedding_bag_collection checks all 2^16
// f16 values against half_to_float.
inline float load_f32(float x) {
    return x;
}

inline float load_f32(BFloat16 x) {
    return bf16_to_float(x);
}

inline float load_f32(Half x) {
    const uint32_t magnitude = x.bits & 0x7fffu;
    // Normal, Inf and NaN: move exponent and mantissa into place and rebias the exponent by
    // 127 - 15, and Inf/NaN's all-ones exponent by another 128 - 16. Masks, not branches.
    const uint32_t inf_nan = 0u - static_cast<uint32_t>(magnitude >= 0x7c00u);
    const uint32_t normal =
        (magnitude << 13) + ((127u - 15u) << 23) + (inf_nan & ((128u - 16u) << 23));
    // Zero and subnormal: magnitude * 2^-24, exact in fp32.
    const float subnormal_value = static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1.0p-24f;
    uint32_t subnormal;
    std::memcpy(&subnormal, &subnormal_value, 4);
    const uint32_t small = 0u - static_cast<uint32_t>(magnitude < 0x400u);
    const uint32_t bits =
        ((normal & ~small) | (subnormal & small)) | (static_cast<uint32_t>(x.bits & 0x8000u) << 16);
    float result;
    std::memcpy(&result, &bits, 4);
    return result;
}

// The vector instructions the lookup converts and sums rows with: AVX-512, else AVX2, each with
// F16C; chosen at run time from the CPU (__builtin_cpu_supports), the build stays baseline
// x86-64. The vector and scalar paths give the same bits (the same operations on each element,
// in the same order); force_scalar_loads(true) selects the scalar path (kNone), for the tests
// that compare them. vector_loads(): vector_isa() is not kNone.
enum class VectorIsa { kNone, kAvx2, kAvx512 };
VectorIsa vector_isa();
bool vector_loads();
void force_scalar_loads(bool scalar);

// dst[0:n] = load_f32(src[0:n]) with the vector instructions of vector_isa() (which must not be
// kNone), n a multiple of 16: the conversion the vector lookup uses (and the comm decode).
void load_f32_vector(const Half* src, float* dst, int64_t n);
void load_f32_vector(const BFloat16* src, float* dst, int64_t n);
// dst[0:n] = from_float(src[0:n]) (float_to_half, float_to_bf16: NaNs as they write them), the
// same preconditions: the fused update's stores and the comm encode.
void store_f32_vector(const float* src, Half* dst, int64_t n);
void store_f32_vector(const float* src, BFloat16* dst, int64_t n);

// dot(a, b) over D in 8 independent partial sums combined pairwise: vectorisable (one running
// sum is a serial chain of D dependent adds) and still one fixed order, so deterministic.
template <typename T>
inline float dot_lanes(const float* __restrict a, const T* __restrict b, int64_t dim) {
    constexpr int64_t kLanes = 8;
    float lane[kLanes] = {};
    int64_t d = 0;
    for (; d + kLanes <= dim; d += kLanes) {
        for (int64_t j = 0; j < kLanes; ++j) {
            lane[j] += a[d + j] * load_f32(b[d + j]);
        }
    }
    for (int64_t j = 0; d < dim; ++d, ++j) {
        lane[j] += a[d] * load_f32(b[d]);
    }
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
           ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

RowContributions alloc_contributions(int64_t count, EmbeddingBackwardWorkspace& workspace);

// num_rows bounds every row (sum E); it sets the number of radix passes.
RowSegments sort_by_row(const RowContributions& c,
                        int64_t num_rows,
                        EmbeddingBackwardWorkspace& workspace);

// Fused optimizer update of every touched row of weights [sum E, D] (and its state).
void apply_fused_update(const RowContributions& c,
                        const RowSegments& segments,
                        const float* grad,
                        const FusedOptimizerParams& optim,
                        Tensor& weights,
                        Tensor* state1,
                        Tensor* state2,
                        EmbeddingBackwardWorkspace& workspace);

// grad_weights [sum E, D] f32: zeros, then the aggregated gradient of every touched row.
void write_dense_gradient(const RowContributions& c,
                          const RowSegments& segments,
                          const float* grad,
                          Tensor& grad_weights);

}  // namespace shardrec::kernels::cpu::detail
