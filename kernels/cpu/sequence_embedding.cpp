// Sequence embedding lookup, CPU: forward copies (upcasts) one row per id, OpenMP over bags; the
// fused backward builds one contribution per id (scale 1, gradient row n) and reuses the pooled
// backward's aggregate-and-update internals (embedding_bag_update.h).
#include "kernels/sequence_embedding.h"

#include "kernels/cpu/embedding_bag_update.h"

namespace shardrec::kernels::cpu {
namespace {

using detail::load_f32;

constexpr int64_t kMinBagsForThreads = 256;

struct SequenceLayout {
    const int64_t* table_offsets;
    const int32_t* feature_table;
    const int64_t* ids;
    const int64_t* offsets;
    int64_t num_features, batch;
};

SequenceLayout layout_of(const Tensor& table_offsets,
                         const Tensor& feature_table,
                         const Tensor& ids,
                         const Tensor& offsets) {
    const int64_t num_features = feature_table.numel();
    return {table_offsets.data<int64_t>(),
            feature_table.data<int32_t>(),
            ids.data<int64_t>(),
            offsets.data<int64_t>(),
            num_features,
            (offsets.numel() - 1) / num_features};
}

}  // namespace

void sequence_embedding_forward(const Tensor& weights,
                                const Tensor& table_offsets,
                                const Tensor& feature_table,
                                const Tensor& ids,
                                const Tensor& offsets,
                                Tensor& out) {
    const SequenceLayout a = layout_of(table_offsets, feature_table, ids, offsets);
    const int64_t dim = weights.size(1);
    const int64_t num_bags = a.num_features * a.batch;
    float* o = out.data<float>();
    visit_float_dtype(weights.dtype(), [&](auto tag) {
        using Weight = typename decltype(tag)::type;
        const Weight* w = weights.data<Weight>();
#pragma omp parallel for schedule(static) if (num_bags >= kMinBagsForThreads)
        for (int64_t j = 0; j < num_bags; ++j) {
            const Weight* table = w + a.table_offsets[a.feature_table[j / a.batch]] * dim;
            for (int64_t n = a.offsets[j]; n < a.offsets[j + 1]; ++n) {
                const Weight* __restrict row = table + a.ids[n] * dim;
                float* __restrict on = o + n * dim;  // out[n, :]
                for (int64_t d = 0; d < dim; ++d) {
                    on[d] = load_f32(row[d]);
                }
            }
        }
    });
}

void sequence_embedding_backward_fused(const Tensor& grad_out,
                                       const Tensor& table_offsets,
                                       const Tensor& feature_table,
                                       const Tensor& ids,
                                       const Tensor& offsets,
                                       const FusedOptimizerParams& optim,
                                       Tensor& weights,
                                       Tensor* state1,
                                       Tensor* state2,
                                       EmbeddingBackwardWorkspace& workspace) {
    const SequenceLayout a = layout_of(table_offsets, feature_table, ids, offsets);
    const int64_t dim = weights.size(1);
    const int64_t num_bags = a.num_features * a.batch;
    detail::RowContributions c = detail::alloc_contributions(ids.numel(), workspace);
#pragma omp parallel for schedule(static) if (num_bags >= kMinBagsForThreads)
    for (int64_t j = 0; j < num_bags; ++j) {
        const int64_t base = a.table_offsets[a.feature_table[j / a.batch]];
        for (int64_t n = a.offsets[j]; n < a.offsets[j + 1]; ++n) {
            c.rows[n] = base + a.ids[n];
            c.grad_offsets[n] = n * dim;  // grad_out[n, :]
            c.scales[n] = 1.f;
        }
    }
    const detail::RowSegments segments = detail::sort_by_row(c, weights.size(0), workspace);
    detail::apply_fused_update(c, segments, grad_out.data<float>(), optim, weights, state1, state2,
                               workspace);
}

}  // namespace shardrec::kernels::cpu
