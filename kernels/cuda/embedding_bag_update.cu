// Sort-then-reduce embedding backward on CUDA (see embedding_bag_update.cuh). Phases: one thread
// per id makes its contribution; CUB radix-sorts (row, id) pairs on the row bits only, the
// contributions' gradient offsets and scales are gathered into sorted order, and the rows are
// run-length encoded; a warp per segment (lanes over D, kColsPerLane columns each per
// 128-column chunk) or a block per hot segment sums the gradient rows in id order and applies
// the update. Most segments hold one or two ids, so the warp kernel is bound by the latency of
// its chain of loads: it reads a segment's bounds in one round trip and, for rows of at most
// kChunkCols columns, loads the row's weights and state while it sums the gradient; f32 rows of
// a multiple of 4 columns go in 16-byte loads, a lane's 4 adjacent columns each (the gather's
// access, which reaches the most bandwidth). Letters: N ids, D dim, E rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/cub.cuh>
#include <type_traits>

#include "kernels/cuda/embedding_bag_update.cuh"
#include "kernels/optimizer_rules.h"

namespace shardrec::kernels::cuda {
namespace {

constexpr int kColsPerLane = 4;
constexpr int64_t kChunkCols = kWarpSize * kColsPerLane;
constexpr int kHotBlockWarps = 8;
constexpr int64_t kMaxDim = 8192;  // the hot-row kernel keeps one gradient row in shared memory
constexpr int kDense = 4;          // the update "rule" that writes a dense gradient instead

// Workspace slots (EmbeddingBackwardWorkspace::buffer).
enum Slot : size_t {
    kKeysIn,
    kKeysOut,
    kIdsIn,
    kIdsOut,
    kGradOffsets,
    kScales,
    kSortedGradOffsets,
    kSortedScales,
    kRows,
    kCounts,
    kBegins,
    kHot,
    kCounters,
    kCubTemp,
    kHotChunkBegin,
    kChunkHot,
    kHotPartial,
    kNumSlots,
};

struct UpdateConstants {
    float lr, eps, beta1, beta2, weight_decay;
    float bias_correction1, bias_correction2;  // Adam: 1 - beta^step
};

int bits_for(int64_t max_value) {  // bits to represent [0, max_value]
    return max_value > 0 ? 64 - __builtin_clzll(static_cast<uint64_t>(max_value)) : 1;
}

// ---- contributions ----

__global__ void contributions_kernel(LookupArgs a,
                                     bool pooled,
                                     bool mean,
                                     BadIdRecord* bad,
                                     uint64_t* keys,
                                     int32_t* id_index,
                                     int64_t* grad_offsets,
                                     float* scales) {
    const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (n >= a.num_ids) {
        return;
    }
    const int64_t num_bags = a.num_features * a.batch;
    const int64_t j = bag_of_id(a.offsets, num_bags, n);
    const int64_t f = j / a.batch;
    const int64_t b = j % a.batch;
    const int32_t t = a.feature_table[f];
    const int64_t first_row = a.table_offsets[t];
    const int64_t rows = a.table_offsets[t + 1] - first_row;
    const int64_t id = a.ids[n];
    const bool valid = id >= 0 && id < rows;
    if (!valid) {
        record_bad_id(bad, f, b, id, rows);
    }
    // Bad ids sort last, into the segment of row total_rows, which no update touches.
    keys[n] = static_cast<uint64_t>(valid ? first_row + id : a.total_rows);
    id_index[n] = static_cast<int32_t>(n);
    if (pooled) {
        grad_offsets[n] = (b * a.num_features + f) * a.dim;  // grad_out[b, f*D]
        const float w = a.per_sample_weights != nullptr ? a.per_sample_weights[n] : 1.f;
        const auto length = static_cast<float>(a.offsets[j + 1] - a.offsets[j]);
        scales[n] = mean ? w / length : w;
    } else {
        grad_offsets[n] = n * a.dim;  // grad_out[n, :]
        scales[n] = 1.f;
    }
}

// The contributions' gradient offsets and scales in sorted order.
__global__ void gather_sorted_kernel(int64_t n,
                                     const int32_t* ids_sorted,
                                     const int64_t* grad_offsets,
                                     const float* scales,
                                     int64_t* sorted_grad_offsets,
                                     float* sorted_scales) {
    const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (k >= n) {
        return;
    }
    const int32_t id = ids_sorted[k];
    sorted_grad_offsets[k] = grad_offsets[id];
    sorted_scales[k] = scales[id];
}

// The hot segments, and each one's run of chunks (its chunks are consecutive, in id order, so
// the order the rows claim their runs in changes nothing).
__global__ void collect_hot_segments_kernel(int64_t max_segments,
                                            int64_t total_rows,
                                            RowSegments sg,
                                            int32_t* hot,
                                            int32_t* num_hot,
                                            int32_t* num_chunks,
                                            int32_t* hot_chunk_begin,
                                            int32_t* chunk_hot) {
    const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (s >= max_segments || s >= *sg.num_segments) {
        return;
    }
    const int32_t count = sg.counts[s];
    if (count > kHotSegmentIds && sg.rows[s] < total_rows) {
        const int32_t h = atomicAdd(num_hot, 1);
        hot[h] = static_cast<int32_t>(s);
        const int32_t chunks = (count + kHotChunkIds - 1) / kHotChunkIds;
        const int32_t first = atomicAdd(num_chunks, chunks);
        hot_chunk_begin[h] = first;
        for (int32_t j = 0; j < chunks; ++j) {
            chunk_hot[first + j] = h;
        }
    }
}

// ---- per-row reduction and update ----

// acc[i] = sum over sorted positions [k_begin, k_end) of scale * grad row, at column
// col0 + lane + 32 i (in id order).
__device__ __forceinline__ void reduce_ids(const RowSegments& sg,
                                           const float* grad,
                                           int64_t dim,
                                           int64_t k_begin,
                                           int64_t k_end,
                                           int64_t col0,
                                           int lane,
                                           float (&acc)[kColsPerLane]) {
    for (int i = 0; i < kColsPerLane; ++i) {
        acc[i] = 0.f;
    }
    for (int64_t k = k_begin; k < k_end; ++k) {
        const float scale = sg.scales[k];
        const float* g = grad + sg.grad_offsets[k] + col0;  // the id's gradient row from col0
        for (int i = 0; i < kColsPerLane; ++i) {
            const int64_t d = lane + kWarpSize * i;
            if (col0 + d < dim) {
                acc[i] += scale * g[d];
            }
        }
    }
}

__host__ __device__ constexpr bool uses_state1(int rule) {  // per element
    return rule == static_cast<int>(OptimType::kExactAdagrad) ||
           rule == static_cast<int>(OptimType::kAdam);
}

__host__ __device__ constexpr bool uses_state2(int rule) {
    return rule == static_cast<int>(OptimType::kAdam);
}

// One element's update by rule kRule (an OptimType) on values in registers: w the weight as f32,
// s1 and s2 its state where the rule keeps one, g already holding the weight decay.
// rowwise_step is lr / (sqrt(G) + eps) of row-wise Adagrad.
template <int kRule>
__device__ __forceinline__ void update_value(
    float g, const UpdateConstants& k, float rowwise_step, float& w, float& s1, float& s2) {
    if constexpr (kRule == static_cast<int>(OptimType::kSgd)) {
        w = rules::sgd(w, g, k.lr);
    } else if constexpr (kRule == static_cast<int>(OptimType::kExactAdagrad)) {
        w = rules::adagrad(w, g, s1, k.lr, k.eps);
    } else if constexpr (kRule == static_cast<int>(OptimType::kExactRowWiseAdagrad)) {
        w = rules::sgd(w, g, rowwise_step);
    } else {
        static_assert(kRule == static_cast<int>(OptimType::kAdam));
        rules::adam_moments(g, k.beta1, k.beta2, s1, s2);
        w = rules::adam(w, s1, s2, k.lr, k.bias_correction1, k.bias_correction2, k.eps);
    }
}

// One element of a touched row in memory, rule kRule (an OptimType, or kDense).
template <typename Weight, int kRule>
__device__ __forceinline__ void update_element(int64_t idx,
                                               float g,
                                               const UpdateConstants& k,
                                               float rowwise_step,
                                               Weight* weights,
                                               float* s1,
                                               float* s2,
                                               float* dense) {
    if constexpr (kRule == kDense) {
        dense[idx] = g;
    } else {
        float w = to_f32(weights[idx]);
        float a = uses_state1(kRule) ? s1[idx] : 0.f;
        float b = uses_state2(kRule) ? s2[idx] : 0.f;
        update_value<kRule>(g, k, rowwise_step, w, a, b);
        weights[idx] = from_f32<Weight>(w);
        if constexpr (uses_state1(kRule)) {
            s1[idx] = a;
        }
        if constexpr (uses_state2(kRule)) {
            s2[idx] = b;
        }
    }
}

template <typename Weight, int kRule>
__device__ __forceinline__ float decayed(float g, const Weight* weights, int64_t idx, float wd) {
    if constexpr (kRule == kDense) {
        return g;
    } else {
        return wd != 0.f ? rules::weight_decay(g, to_f32(weights[idx]), wd) : g;
    }
}

struct UpdateTarget {
    void* weights;  // Weight [sum E, D]
    float* state1;  // [sum E, D], or [sum E] for row-wise Adagrad
    float* state2;
    float* dense;  // grad_weights [sum E, D] for kDense
};

// A row of at most kChunkCols columns (each lane holds kColsPerLane of its columns): the row's
// weights and state are loaded before its gradient is summed, so that their latency overlaps the
// reduction's; the same arithmetic, in the same order, as update_element.
template <typename Weight, int kRule>
__device__ __forceinline__ void update_short_row(const RowSegments& sg,
                                                 const float* grad,
                                                 int64_t dim,
                                                 const UpdateConstants& k,
                                                 const UpdateTarget& target,
                                                 int64_t row,
                                                 int64_t begin,
                                                 int32_t count,
                                                 int lane) {
    constexpr bool kRowWise = kRule == static_cast<int>(OptimType::kExactRowWiseAdagrad);
    auto* weights = static_cast<Weight*>(target.weights);
    const int64_t row_base = row * dim;
    float w[kColsPerLane], s1[kColsPerLane], s2[kColsPerLane];
    for (int i = 0; i < kColsPerLane; ++i) {
        const int64_t d = lane + kWarpSize * i;
        w[i] = d < dim ? to_f32(weights[row_base + d]) : 0.f;
        s1[i] = uses_state1(kRule) && d < dim ? target.state1[row_base + d] : 0.f;
        s2[i] = uses_state2(kRule) && d < dim ? target.state2[row_base + d] : 0.f;
    }
    const float old_sum = kRowWise ? target.state1[row] : 0.f;
    float acc[kColsPerLane];
    reduce_ids(sg, grad, dim, begin, begin + count, 0, lane, acc);
    float sum_sq = 0.f;
    for (int i = 0; i < kColsPerLane; ++i) {
        if (lane + kWarpSize * i < dim) {
            acc[i] =
                k.weight_decay != 0.f ? rules::weight_decay(acc[i], w[i], k.weight_decay) : acc[i];
            sum_sq += acc[i] * acc[i];
        }
    }
    float rowwise_step = 0.f;
    if constexpr (kRowWise) {
        // G += mean over D of g^2.
        float new_sum = old_sum;
        rowwise_step = rules::rowwise_adagrad_rate(
            new_sum, warp_sum(sum_sq) / static_cast<float>(dim), k.lr, k.eps);
        if (lane == 0) {
            target.state1[row] = new_sum;
        }
    }
    for (int i = 0; i < kColsPerLane; ++i) {
        const int64_t d = lane + kWarpSize * i;
        if (d < dim) {
            update_value<kRule>(acc[i], k, rowwise_step, w[i], s1[i], s2[i]);
            weights[row_base + d] = from_f32<Weight>(w[i]);
            if constexpr (uses_state1(kRule)) {
                target.state1[row_base + d] = s1[i];
            }
            if constexpr (uses_state2(kRule)) {
                target.state2[row_base + d] = s2[i];
            }
        }
    }
}

// update_short_row for f32 rows of dim % 4 == 0 columns (dim <= kChunkCols), every row and
// gradient row 16-byte aligned: lane l holds columns [4 l, 4 l + 4), loaded and stored as float4.
// Each element's arithmetic is update_short_row's; the row-wise sum of squares adds the columns in
// another order.
template <int kRule>
__device__ __forceinline__ void update_short_row_vec4(const RowSegments& sg,
                                                      const float* grad,
                                                      int64_t dim,
                                                      const UpdateConstants& k,
                                                      const UpdateTarget& target,
                                                      int64_t row,
                                                      int64_t begin,
                                                      int32_t count,
                                                      int lane) {
    constexpr bool kRowWise = kRule == static_cast<int>(OptimType::kExactRowWiseAdagrad);
    auto* weights = static_cast<float*>(target.weights);
    const int64_t d0 = 4 * static_cast<int64_t>(lane);
    const bool active = d0 < dim;
    const int64_t at = row * dim + d0;
    float4 w4 = make_float4(0.f, 0.f, 0.f, 0.f), s14 = w4, s24 = w4, acc4 = w4;
    if (active) {
        w4 = *reinterpret_cast<const float4*>(weights + at);
        if constexpr (uses_state1(kRule)) {
            s14 = *reinterpret_cast<const float4*>(target.state1 + at);
        }
        if constexpr (uses_state2(kRule)) {
            s24 = *reinterpret_cast<const float4*>(target.state2 + at);
        }
    }
    const float old_sum = kRowWise ? target.state1[row] : 0.f;
    for (int64_t kk = begin; kk < begin + count; ++kk) {
        const float scale = sg.scales[kk];
        const float* g = grad + sg.grad_offsets[kk];
        if (active) {
            const float4 g4 = *reinterpret_cast<const float4*>(g + d0);
            acc4.x += scale * g4.x;
            acc4.y += scale * g4.y;
            acc4.z += scale * g4.z;
            acc4.w += scale * g4.w;
        }
    }
    float w[4] = {w4.x, w4.y, w4.z, w4.w};
    float s1[4] = {s14.x, s14.y, s14.z, s14.w};
    float s2[4] = {s24.x, s24.y, s24.z, s24.w};
    float acc[4] = {acc4.x, acc4.y, acc4.z, acc4.w};
    float sum_sq = 0.f;
    for (int i = 0; i < 4; ++i) {
        acc[i] = k.weight_decay != 0.f ? rules::weight_decay(acc[i], w[i], k.weight_decay) : acc[i];
        sum_sq += active ? acc[i] * acc[i] : 0.f;
    }
    float rowwise_step = 0.f;
    if constexpr (kRowWise) {
        float new_sum = old_sum;
        rowwise_step = rules::rowwise_adagrad_rate(
            new_sum, warp_sum(sum_sq) / static_cast<float>(dim), k.lr, k.eps);
        if (lane == 0) {
            target.state1[row] = new_sum;
        }
    }
    if (!active) {
        return;
    }
    for (int i = 0; i < 4; ++i) {
        update_value<kRule>(acc[i], k, rowwise_step, w[i], s1[i], s2[i]);
    }
    *reinterpret_cast<float4*>(weights + at) = make_float4(w[0], w[1], w[2], w[3]);
    if constexpr (uses_state1(kRule)) {
        *reinterpret_cast<float4*>(target.state1 + at) = make_float4(s1[0], s1[1], s1[2], s1[3]);
    }
    if constexpr (uses_state2(kRule)) {
        *reinterpret_cast<float4*>(target.state2 + at) = make_float4(s2[0], s2[1], s2[2], s2[3]);
    }
}

// A warp per segment of at most kHotSegmentIds ids; kVec4: rows take update_short_row_vec4.
template <typename Weight, int kRule, bool kVec4>
__global__ void segment_update_warp_kernel(
    RowSegments sg, const float* grad, int64_t dim, UpdateConstants k, UpdateTarget target) {
    const int64_t s = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (s >= sg.max_segments) {
        return;
    }
    // The segment's bounds in one round trip: every load is issued before any is tested (rows[s]
    // past num_segments is never used).
    const int32_t num_segments = *sg.num_segments;
    const int64_t row = sg.rows[s];
    const int32_t count = sg.counts[s];
    const int64_t begin = sg.begins[s];
    if (s >= num_segments || row >= sg.total_rows || count > kHotSegmentIds) {
        return;  // past the last segment, bad ids, or a hot row for the block kernel
    }
    if constexpr (kVec4) {
        static_assert(std::is_same_v<Weight, float> && kRule != kDense);
        update_short_row_vec4<kRule>(sg, grad, dim, k, target, row, begin, count, lane);
        return;
    }
    if constexpr (kRule != kDense) {
        if (dim <= kChunkCols) {
            update_short_row<Weight, kRule>(sg, grad, dim, k, target, row, begin, count, lane);
            return;
        }
    }
    auto* weights = static_cast<Weight*>(target.weights);
    const int64_t row_base = row * dim;
    const int64_t num_chunks = ceil_div(dim, kChunkCols);
    float acc[kColsPerLane];
    float rowwise_step = 0.f;
    if constexpr (kRule == static_cast<int>(OptimType::kExactRowWiseAdagrad)) {
        // G += mean over D of g^2 needs the whole row first: one pass for the sum of squares.
        float sum_sq = 0.f;
        for (int64_t c = 0; c < num_chunks; ++c) {
            reduce_ids(sg, grad, dim, begin, begin + count, c * kChunkCols, lane, acc);
            for (int i = 0; i < kColsPerLane; ++i) {
                const int64_t d = c * kChunkCols + lane + kWarpSize * i;
                if (d < dim) {
                    acc[i] = decayed<Weight, kRule>(acc[i], weights, row_base + d, k.weight_decay);
                    sum_sq += acc[i] * acc[i];
                }
            }
        }
        const float old_sum = target.state1[row];
        float new_sum = old_sum;
        rowwise_step = rules::rowwise_adagrad_rate(
            new_sum, warp_sum(sum_sq) / static_cast<float>(dim), k.lr, k.eps);
        if (lane == 0) {
            target.state1[row] = new_sum;
        }
    }
    for (int64_t c = 0; c < num_chunks; ++c) {
        reduce_ids(sg, grad, dim, begin, begin + count, c * kChunkCols, lane, acc);
        for (int i = 0; i < kColsPerLane; ++i) {
            const int64_t d = c * kChunkCols + lane + kWarpSize * i;
            if (d < dim) {
                const float g =
                    decayed<Weight, kRule>(acc[i], weights, row_base + d, k.weight_decay);
                update_element<Weight, kRule>(row_base + d, g, k, rowwise_step, weights,
                                              target.state1, target.state2, target.dense);
            }
        }
    }
}

// The sums over sorted positions [first, first + n) of scale * grad row, by the whole block:
// warp w sums its fixed contiguous slice of the positions, the slices are added in warp order
// (partial: [kHotBlockWarps * kChunkCols] shared), and out(d, sum) takes column d's, for every
// column of [0, D) in chunks of kChunkCols.
template <typename Out>
__device__ void block_sum_ids(const RowSegments& sg,
                              const float* grad,
                              int64_t dim,
                              int64_t first,
                              int64_t n,
                              float* partial,
                              Out out) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int64_t slice = ceil_div(n, kHotBlockWarps);
    const int64_t k_begin = first + min(n, warp * slice);
    const int64_t k_end = first + min(n, (warp + 1) * slice);
    for (int64_t c0 = 0; c0 < dim; c0 += kChunkCols) {
        float acc[kColsPerLane];
        reduce_ids(sg, grad, dim, k_begin, k_end, c0, lane, acc);
        for (int i = 0; i < kColsPerLane; ++i) {
            partial[warp * kChunkCols + lane + kWarpSize * i] = acc[i];
        }
        __syncthreads();
        for (int64_t col = threadIdx.x; col < kChunkCols && c0 + col < dim; col += blockDim.x) {
            float sum = 0.f;
            for (int w = 0; w < kHotBlockWarps; ++w) {
                sum += partial[w * kChunkCols + col];
            }
            out(c0 + col, sum);
        }
        __syncthreads();
    }
}

// A hot row's update by the whole block from its gradient g_row [D] in shared memory (weight
// decay applied): row-wise Adagrad's accumulator from the row's mean g^2, then every element.
template <typename Weight, int kRule>
__device__ void update_hot_row(int64_t row,
                               const float* g_row,
                               float* reduce_scratch,
                               int64_t dim,
                               const UpdateConstants& k,
                               const UpdateTarget& target) {
    auto* weights = static_cast<Weight*>(target.weights);
    float rowwise_step = 0.f;
    if constexpr (kRule == static_cast<int>(OptimType::kExactRowWiseAdagrad)) {
        float sum_sq = 0.f;
        for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
            sum_sq += g_row[d] * g_row[d];
        }
        const float old_sum = target.state1[row];
        float new_sum = old_sum;
        rowwise_step = rules::rowwise_adagrad_rate(
            new_sum, block_sum(sum_sq, reduce_scratch) / static_cast<float>(dim), k.lr, k.eps);
        if (threadIdx.x == 0) {
            target.state1[row] = new_sum;
        }
    }
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
        update_element<Weight, kRule>(row * dim + d, g_row[d], k, rowwise_step, weights,
                                      target.state1, target.state2, target.dense);
    }
    __syncthreads();  // g_row is reused by the next hot row
}

// A block per hot segment (HotRowUpdate::kBlock): warp w sums its fixed contiguous slice of the
// segment's ids, the slices are added in warp order into a shared gradient row, then all threads
// update the row.
template <typename Weight, int kRule>
__global__ void segment_update_hot_block_kernel(
    RowSegments sg, const float* grad, int64_t dim, UpdateConstants k, UpdateTarget target) {
    extern __shared__ float shared[];
    float* partial = shared;                               // [warps][kChunkCols]
    float* g_row = partial + kHotBlockWarps * kChunkCols;  // [D]
    float* reduce_scratch = g_row + dim;                   // [32]
    auto* weights = static_cast<Weight*>(target.weights);
    for (int64_t h = blockIdx.x; h < *sg.num_hot; h += gridDim.x) {
        const int64_t s = sg.hot[h];
        const int64_t row = sg.rows[s];
        block_sum_ids(
            sg, grad, dim, sg.begins[s], sg.counts[s], partial, [&](int64_t d, float sum) {
                g_row[d] = decayed<Weight, kRule>(sum, weights, row * dim + d, k.weight_decay);
            });
        update_hot_row<Weight, kRule>(row, g_row, reduce_scratch, dim, k, target);
    }
}

// Pass 1 of a hot row in chunks (HotRowUpdate::kChunked): a block per chunk of kHotChunkIds of
// its sorted ids; warp w sums its fixed contiguous slice of the chunk, the slices are added in
// warp order into the chunk's row of hot_partial.
__global__ void hot_chunk_sum_kernel(RowSegments sg, const float* grad, int64_t dim) {
    __shared__ float partial[kHotBlockWarps * kChunkCols];
    const int32_t num_chunks = *sg.num_chunks;
    for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
        const int32_t h = sg.chunk_hot[c];
        const int32_t s = sg.hot[h];
        const int64_t j = c - sg.hot_chunk_begin[h];
        const int64_t n = min(static_cast<int64_t>(kHotChunkIds), sg.counts[s] - j * kHotChunkIds);
        block_sum_ids(sg, grad, dim, sg.begins[s] + j * kHotChunkIds, n, partial,
                      [&](int64_t d, float sum) { sg.hot_partial[c * dim + d] = sum; });
    }
}

// Pass 2: a block per hot row adds its chunks' sums in chunk order and updates the row.
template <typename Weight, int kRule>
__global__ void hot_chunk_update_kernel(RowSegments sg,
                                        int64_t dim,
                                        UpdateConstants k,
                                        UpdateTarget target) {
    extern __shared__ float shared[];
    float* g_row = shared;                // [D]
    float* reduce_scratch = g_row + dim;  // [32]
    auto* weights = static_cast<Weight*>(target.weights);
    for (int64_t h = blockIdx.x; h < *sg.num_hot; h += gridDim.x) {
        const int32_t s = sg.hot[h];
        const int64_t row = sg.rows[s];
        const int64_t first = sg.hot_chunk_begin[h];
        const int64_t chunks = ceil_div(sg.counts[s], kHotChunkIds);
        for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
            float sum = 0.f;
            for (int64_t c = first; c < first + chunks; ++c) {
                sum += sg.hot_partial[c * dim + d];
            }
            g_row[d] = decayed<Weight, kRule>(sum, weights, row * dim + d, k.weight_decay);
        }
        __syncthreads();
        update_hot_row<Weight, kRule>(row, g_row, reduce_scratch, dim, k, target);
    }
}

template <typename Weight, int kRule>
void launch_segment_update(const RowSegments& sg,
                           const float* grad,
                           int64_t dim,
                           const UpdateConstants& k,
                           const UpdateTarget& target,
                           cudaStream_t s) {
    if (sg.max_segments == 0) {
        return;
    }
    const unsigned warp_blocks = blocks_for(sg.max_segments * kWarpSize);
    bool vec4 = false;
    if constexpr (std::is_same_v<Weight, float> && kRule != kDense) {
        auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
        vec4 = dim % 4 == 0 && dim <= kChunkCols && aligned(grad) && aligned(target.weights) &&
               (!uses_state1(kRule) || aligned(target.state1)) &&
               (!uses_state2(kRule) || aligned(target.state2));
        if (vec4) {
            segment_update_warp_kernel<Weight, kRule, true>
                <<<warp_blocks, kBlockSize, 0, s>>>(sg, grad, dim, k, target);
        }
    }
    if (!vec4) {
        segment_update_warp_kernel<Weight, kRule, false>
            <<<warp_blocks, kBlockSize, 0, s>>>(sg, grad, dim, k, target);
    }
    SR_CUDA_LAUNCH_CHECK(s);
    const int64_t max_hot = std::max<int64_t>(1, sg.max_segments / (kHotSegmentIds + 1));
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(max_hot, 1024));
    if (hot_row_update() == HotRowUpdate::kBlock) {
        const size_t shared = (kHotBlockWarps * kChunkCols + dim + kWarpSize) * sizeof(float);
        segment_update_hot_block_kernel<Weight, kRule>
            <<<blocks, kHotBlockWarps * kWarpSize, shared, s>>>(sg, grad, dim, k, target);
        SR_CUDA_LAUNCH_CHECK(s);
        return;
    }
    // Enough blocks for every SM several times over; each loops over chunks (rows) past them.
    const auto chunk_blocks = static_cast<unsigned>(std::min<int64_t>(sg.max_chunks, 4096));
    hot_chunk_sum_kernel<<<chunk_blocks, kHotBlockWarps * kWarpSize, 0, s>>>(sg, grad, dim);
    SR_CUDA_LAUNCH_CHECK(s);
    const size_t shared = (dim + kWarpSize) * sizeof(float);
    hot_chunk_update_kernel<Weight, kRule>
        <<<blocks, kHotBlockWarps * kWarpSize, shared, s>>>(sg, dim, k, target);
    SR_CUDA_LAUNCH_CHECK(s);
}

template <typename T>
T* slot_buffer(EmbeddingBackwardWorkspace& ws, Slot slot, int64_t count, Device device) {
    return static_cast<T*>(
        ws.buffer(slot, std::max<int64_t>(count, 1) * static_cast<int64_t>(sizeof(T)), device));
}

}  // namespace

RowSegments sort_contributions(const LookupArgs& a,
                               bool pooled,
                               PoolingMode mode,
                               EmbeddingBackwardWorkspace& workspace,
                               Stream& stream) {
    const int64_t n = a.num_ids;
    SR_CHECK(n < INT32_MAX, "embedding backward on CUDA: {} ids exceed the 32-bit id index", n);
    SR_CHECK(a.dim <= kMaxDim, "embedding backward on CUDA: dim {} above the supported {}", a.dim,
             kMaxDim);
    const cudaStream_t s = cuda_stream(stream);
    const Device device = stream.device();
    const int count = static_cast<int>(n);
    const int end_bit = bits_for(a.total_rows);  // row keys and the bad-id key total_rows
    // CUB's scratch: the most any of the three passes needs.
    size_t sort_bytes = 0, rle_bytes = 0, scan_bytes = 0;
    SR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (uint64_t*)nullptr,
                                                  (uint64_t*)nullptr, (int32_t*)nullptr,
                                                  (int32_t*)nullptr, count, 0, end_bit, s));
    SR_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, (uint64_t*)nullptr,
                                                     (int64_t*)nullptr, (int32_t*)nullptr,
                                                     (int32_t*)nullptr, count, s));
    SR_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, (int32_t*)nullptr,
                                                (int32_t*)nullptr, count, s));
    const auto cub_bytes = static_cast<int64_t>(std::max({sort_bytes, rle_bytes, scan_bytes}));
    // Hot rows in chunks: each claims ceil(count / C) chunks, so at most n / C chunks plus one
    // per hot row (a hot row has more than kHotSegmentIds ids).
    const int64_t max_chunks = n / kHotChunkIds + n / (kHotSegmentIds + 1) + 1;
    const int64_t slot_bytes[kNumSlots] = {8 * n,
                                           8 * n,
                                           4 * n,
                                           4 * n,
                                           8 * n,
                                           4 * n,
                                           8 * n,
                                           4 * n,
                                           8 * n,
                                           4 * n,
                                           4 * n,
                                           4 * n,
                                           16,
                                           cub_bytes,
                                           4 * n,
                                           4 * max_chunks,
                                           4 * max_chunks * a.dim};
    bool fits = true;
    for (size_t i = 0; i < kNumSlots; ++i) {
        fits = fits && workspace.fits(i, std::max<int64_t>(slot_bytes[i], 4), device);
    }
    if (!fits) {
        stream.synchronize();  // earlier kernels on this stream may still read the old buffers
    }
    auto* keys_in = slot_buffer<uint64_t>(workspace, kKeysIn, n, device);
    auto* keys_out = slot_buffer<uint64_t>(workspace, kKeysOut, n, device);
    auto* ids_in = slot_buffer<int32_t>(workspace, kIdsIn, n, device);
    auto* ids_out = slot_buffer<int32_t>(workspace, kIdsOut, n, device);
    auto* grad_offsets = slot_buffer<int64_t>(workspace, kGradOffsets, n, device);
    auto* scales = slot_buffer<float>(workspace, kScales, n, device);
    auto* sorted_grad_offsets = slot_buffer<int64_t>(workspace, kSortedGradOffsets, n, device);
    auto* sorted_scales = slot_buffer<float>(workspace, kSortedScales, n, device);
    auto* rows = slot_buffer<int64_t>(workspace, kRows, n, device);
    auto* counts = slot_buffer<int32_t>(workspace, kCounts, n, device);
    auto* begins = slot_buffer<int32_t>(workspace, kBegins, n, device);
    auto* hot = slot_buffer<int32_t>(workspace, kHot, n, device);
    auto* counters =
        slot_buffer<int32_t>(workspace, kCounters, 4, device);  // segments, hot, chunks
    auto* hot_chunk_begin = slot_buffer<int32_t>(workspace, kHotChunkBegin, n, device);
    auto* chunk_hot = slot_buffer<int32_t>(workspace, kChunkHot, max_chunks, device);
    auto* hot_partial = slot_buffer<float>(workspace, kHotPartial, max_chunks * a.dim, device);
    void* cub_temp = workspace.buffer(kCubTemp, std::max<int64_t>(cub_bytes, 4), device);

    RowSegments sg;
    sg.max_segments = n;
    sg.total_rows = a.total_rows;
    sg.num_segments = counters;
    sg.rows = rows;
    sg.counts = counts;
    sg.begins = begins;
    sg.grad_offsets = sorted_grad_offsets;
    sg.scales = sorted_scales;
    sg.num_hot = counters + 1;
    sg.hot = hot;
    sg.max_chunks = max_chunks;
    sg.num_chunks = counters + 2;
    sg.hot_chunk_begin = hot_chunk_begin;
    sg.chunk_hot = chunk_hot;
    sg.hot_partial = hot_partial;
    SR_CUDA_CHECK(cudaMemsetAsync(counters, 0, 4 * sizeof(int32_t), s));
    if (n == 0) {
        return sg;
    }
    contributions_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(a, pooled, mode == PoolingMode::kMean,
                                                              bad_id_record(device.index), keys_in,
                                                              ids_in, grad_offsets, scales);
    SR_CUDA_LAUNCH_CHECK(s);
    // Radix sort is stable: the ids of a row keep ascending index order.
    SR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, sort_bytes, keys_in, keys_out, ids_in,
                                                  ids_out, count, 0, end_bit, s));
    gather_sorted_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(n, ids_out, grad_offsets, scales,
                                                              sorted_grad_offsets, sorted_scales);
    SR_CUDA_LAUNCH_CHECK(s);
    // Counts past the last run stay 0, so the scan over all N entries is defined.
    SR_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(n) * sizeof(int32_t), s));
    SR_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(cub_temp, rle_bytes, keys_out,
                                                     reinterpret_cast<uint64_t*>(rows), counts,
                                                     counters, count, s));
    SR_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(cub_temp, scan_bytes, counts, begins, count, s));
    collect_hot_segments_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(
        n, a.total_rows, sg, hot, counters + 1, counters + 2, hot_chunk_begin, chunk_hot);
    SR_CUDA_LAUNCH_CHECK(s);
    return sg;
}

void apply_fused_update(const RowSegments& segments,
                        const float* grad,
                        const FusedOptimizerParams& optim,
                        Tensor& weights,
                        Tensor* state1,
                        Tensor* state2,
                        Stream& stream) {
    const UpdateConstants k{
        optim.learning_rate,
        optim.eps,
        optim.beta1,
        optim.beta2,
        optim.weight_decay,
        static_cast<float>(rules::adam_bias_correction(optim.beta1, optim.step)),
        static_cast<float>(rules::adam_bias_correction(optim.beta2, optim.step))};
    const UpdateTarget target{weights.data_ptr(), state1 ? state1->data<float>() : nullptr,
                              state2 ? state2->data<float>() : nullptr, nullptr};
    const int64_t dim = weights.size(1);
    const cudaStream_t s = cuda_stream(stream);
    visit_float_dtype(weights.dtype(), [&](auto tag) {
        using Weight = typename decltype(tag)::type;
        switch (optim.type) {
            case OptimType::kSgd:
                return launch_segment_update<Weight, static_cast<int>(OptimType::kSgd)>(
                    segments, grad, dim, k, target, s);
            case OptimType::kExactAdagrad:
                return launch_segment_update<Weight, static_cast<int>(OptimType::kExactAdagrad)>(
                    segments, grad, dim, k, target, s);
            case OptimType::kExactRowWiseAdagrad:
                return launch_segment_update<Weight,
                                             static_cast<int>(OptimType::kExactRowWiseAdagrad)>(
                    segments, grad, dim, k, target, s);
            case OptimType::kAdam:
                return launch_segment_update<Weight, static_cast<int>(OptimType::kAdam)>(
                    segments, grad, dim, k, target, s);
        }
    });
}

void write_dense_gradient(const RowSegments& segments,
                          const float* grad,
                          Tensor& grad_weights,
                          Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    SR_CUDA_CHECK(cudaMemsetAsync(grad_weights.data_ptr(), 0, grad_weights.nbytes(), s));
    const UpdateTarget target{nullptr, nullptr, nullptr, grad_weights.data<float>()};
    launch_segment_update<float, kDense>(segments, grad, grad_weights.size(1), UpdateConstants{},
                                         target, s);
}

}  // namespace shardrec::kernels::cuda
