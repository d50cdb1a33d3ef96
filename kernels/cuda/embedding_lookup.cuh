// What the CUDA embedding kernels share (pooled and sequence, forward and backward): the lookup
// layout of kernels/embedding_bag.h as raw pointers, 16-byte row loads in the storage dtype, the
// lanes-per-bag choice, and the report of out-of-range ids. Letters: F features, B batch, D dim,
// N ids.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/embedding_bag.h"

namespace shardrec::kernels::cuda {

struct LookupArgs {
    const int64_t* table_offsets;     // [T + 1]
    const int32_t* feature_table;     // [F]
    const int64_t* ids;               // [N]
    const int64_t* offsets;           // [F*B + 1]
    const float* per_sample_weights;  // [N] or null
    int64_t num_features, batch, dim, num_ids, total_rows;
};

LookupArgs lookup_args(const Tensor& weights,
                       const Tensor& table_offsets,
                       const Tensor& feature_table,
                       const Tensor& ids,
                       const Tensor& offsets,
                       const Tensor* per_sample_weights);

// ---- bad ids ----

// The first out-of-range id a kernel met, in mapped pinned host memory (one record per device).
// Kernels skip such ids (they add nothing) and record the first; the host reports it, as an Error
// naming feature, sample, id and range, at the next embedding entry on that device.
struct BadIdRecord {
    int32_t state;  // 0 none, 1 being written, 2 complete
    int32_t feature;
    int64_t sample, id, rows;
};

// The device's record (made on first use).
BadIdRecord* bad_id_record(int device);
// Throws if a kernel recorded a bad id on this device since the last check (then clears it).
void throw_if_bad_id(int device);

__device__ __forceinline__ void record_bad_id(
    BadIdRecord* r, int64_t feature, int64_t sample, int64_t id, int64_t rows) {
    if (atomicCAS(&r->state, 0, 1) == 0) {
        r->feature = static_cast<int32_t>(feature);
        r->sample = sample;
        r->id = id;
        r->rows = rows;
        __threadfence_system();
        atomicExch(&r->state, 2);
    }
}

// ---- row loads: V storage elements per load (16 bytes when V = 16 / sizeof(Weight)) ----

template <typename Weight, int V>
struct RowLoad;

template <typename Weight>
struct RowLoad<Weight, 1> {
    __device__ __forceinline__ static void load(const Weight* p, float* f) { f[0] = to_f32(*p); }
};

template <>
struct RowLoad<float, 4> {
    __device__ __forceinline__ static void load(const float* p, float* f) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p));
        f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
    }
};

template <typename Weight>
struct RowLoad16Bit {
    __device__ __forceinline__ static void load(const Weight* p, float* f) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
        for (int i = 0; i < 4; ++i) {
            f[2 * i] = to_f32(Weight{static_cast<uint16_t>(words[i] & 0xffffu)});
            f[2 * i + 1] = to_f32(Weight{static_cast<uint16_t>(words[i] >> 16)});
        }
    }
};

template <>
struct RowLoad<Half, 8> : RowLoad16Bit<Half> {};

template <>
struct RowLoad<BFloat16, 8> : RowLoad16Bit<BFloat16> {};

template <int V>
__device__ __forceinline__ void store_f32(float* p, const float* f) {
    if constexpr (V % 4 == 0) {
        for (int i = 0; i < V; i += 4) {
            *reinterpret_cast<float4*>(p + i) = make_float4(f[i], f[i + 1], f[i + 2], f[i + 3]);
        }
    } else {
        for (int i = 0; i < V; ++i) {
            p[i] = f[i];
        }
    }
}

// Elements per 16-byte load of the storage type.
template <typename Weight>
constexpr int kVecWidth = 16 / static_cast<int>(sizeof(Weight));

// Whether every row (and every output row) can be read in 16-byte loads: D a multiple of the
// vector width and both base pointers 16-byte aligned.
template <typename Weight>
bool rows_vectorizable(int64_t dim, const void* weights, const void* out) {
    return dim % kVecWidth<Weight> == 0 && is_aligned(weights, 16) && is_aligned(out, 16);
}

// Lanes that share one bag: enough to cover D in loads of `vec` elements, a power of two <= 32,
// so small dims pack several bags into a warp (FBGEMM's sub-warp kernels).
inline int lanes_per_bag(int64_t dim, int vec) {
    const int64_t needed = ceil_div(dim, vec);
    int lanes = 1;
    while (lanes < kWarpSize && lanes < needed) {
        lanes *= 2;
    }
    return lanes;
}

// Bag j of the KJT layout for id n: the last j with offsets[j] <= n (binary search).
__device__ __forceinline__ int64_t bag_of_id(const int64_t* offsets, int64_t num_bags, int64_t n) {
    int64_t lo = 0, hi = num_bags;  // offsets[lo] <= n < offsets[hi]
    while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (offsets[mid] <= n) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

}  // namespace shardrec::kernels::cuda
