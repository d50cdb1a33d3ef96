// Pooled embedding lookup, forward, CPU. OpenMP over bags (dynamic chunks); one thread sums a
// bag in id order straight into its output slice, so results do not depend on the thread count.
// The inner loop over D vectorises; rows kPrefetchIds ids ahead are prefetched (random rows of a
// large table are the whole cost). Letters: F features, B batch, D dim, N ids.
#include "kernels/cpu/embedding_bag_update.h"

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
    if (c0 == dim) {
        return;
    }
    for (int64_t d = c0; d < dim; ++d) {
        o[d] = 0.f;
    }
    for (int64_t n = begin; n < end; ++n) {
        if (c0 == 0 && n + kPrefetchIds < prefetch_end) {
            prefetch_row(table + a.ids[n + kPrefetchIds] * dim, dim);
        }
        const Weight* __restrict row = table + a.ids[n] * dim;
        const float w = scale(n);
        for (int64_t d = c0; d < dim; ++d) {
            o[d] += kWeighted ? w * load_f32(row[d]) : load_f32(row[d]);
        }
    }
}

template <typename Weight, bool kWeighted, PoolingMode kMode>
void forward_typed(const Lookup& a, const Weight* weights, float* out) {
    const int64_t num_bags = a.num_features * a.batch;
    const int64_t dim = a.dim;
    const int64_t work = a.offsets[num_bags] * dim;
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
        pool_bag<Weight, kWeighted>(a, table, begin, end, feature_end, o);
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
