// Pooled embedding backward, CPU: dense gradient and fused optimizer update. Both turn every id
// into a contribution s_n * grad_out[b, f*D : (f+1)*D] (s_n = w_n, / L for MEAN), then share
// the aggregate-and-update internals of embedding_bag_update.h with the sequence backward.
#include "kernels/cpu/embedding_bag_update.h"

namespace shardrec::kernels::cpu {
namespace {

constexpr int64_t kMinBagsForThreads = 256;

// One contribution per id, in id order (OpenMP over bags; every id is written once).
detail::RowContributions gather_pooled(const Tensor& table_offsets,
                                       const Tensor& feature_table,
                                       const Tensor& ids,
                                       const Tensor& offsets,
                                       const Tensor* per_sample_weights,
                                       PoolingMode mode,
                                       int64_t dim,
                                       EmbeddingBackwardWorkspace& workspace) {
    const int64_t num_features = feature_table.numel();
    const int64_t batch = (offsets.numel() - 1) / num_features;
    const int64_t* toff = table_offsets.data<int64_t>();
    const int32_t* ftab = feature_table.data<int32_t>();
    const int64_t* id = ids.data<int64_t>();
    const int64_t* off = offsets.data<int64_t>();
    const float* psw = per_sample_weights ? per_sample_weights->data<float>() : nullptr;
    detail::RowContributions c = detail::alloc_contributions(ids.numel(), workspace);
    const int64_t num_bags = num_features * batch;
#pragma omp parallel for schedule(static) if (num_bags >= kMinBagsForThreads)
    for (int64_t j = 0; j < num_bags; ++j) {
        const int64_t f = j / batch;
        const int64_t b = j % batch;
        const int64_t base = toff[ftab[f]];
        const auto length = static_cast<float>(off[j + 1] - off[j]);
        const bool mean = mode == PoolingMode::kMean;
        for (int64_t n = off[j]; n < off[j + 1]; ++n) {
            c.rows[n] = base + id[n];
            c.grad_offsets[n] = (b * num_features + f) * dim;  // grad_out[b, f*D]
            const float w = psw ? psw[n] : 1.f;
            c.scales[n] = mean ? w / length : w;
        }
    }
    return c;
}

// grad_psw[n] = dot(grad_out bag, row(id_n)) (/ L for MEAN), fp32 in a fixed order.
template <typename Weight>
void per_sample_weight_grad(const Tensor& grad_out,
                            const Weight* weights,
                            const Tensor& table_offsets,
                            const Tensor& feature_table,
                            const Tensor& ids,
                            const Tensor& offsets,
                            PoolingMode mode,
                            int64_t dim,
                            float* grad_psw) {
    const int64_t num_features = feature_table.numel();
    const int64_t batch = (offsets.numel() - 1) / num_features;
    const int64_t* toff = table_offsets.data<int64_t>();
    const int32_t* ftab = feature_table.data<int32_t>();
    const int64_t* id = ids.data<int64_t>();
    const int64_t* off = offsets.data<int64_t>();
    const float* g = grad_out.data<float>();
    const int64_t num_bags = num_features * batch;
#pragma omp parallel for schedule(static) if (num_bags >= kMinBagsForThreads)
    for (int64_t j = 0; j < num_bags; ++j) {
        const int64_t f = j / batch;
        const int64_t b = j % batch;
        const float* gb = g + (b * num_features + f) * dim;
        const Weight* table = weights + toff[ftab[f]] * dim;
        const auto length = static_cast<float>(off[j + 1] - off[j]);
        for (int64_t n = off[j]; n < off[j + 1]; ++n) {
            const Weight* row = table + id[n] * dim;
            const float dot = detail::dot_lanes(gb, row, dim);
            grad_psw[n] = mode == PoolingMode::kMean ? dot / length : dot;
        }
    }
}

}  // namespace

void embedding_bag_backward(const Tensor& grad_out,
                            const Tensor& weights,
                            const Tensor& table_offsets,
                            const Tensor& feature_table,
                            const Tensor& ids,
                            const Tensor& offsets,
                            const Tensor* per_sample_weights,
                            PoolingMode mode,
                            Tensor* grad_weights,
                            Tensor* grad_per_sample_weights,
                            EmbeddingBackwardWorkspace& workspace) {
    const int64_t dim = weights.size(1);
    if (grad_weights != nullptr) {
        const detail::RowContributions c = gather_pooled(table_offsets, feature_table, ids, offsets,
                                                         per_sample_weights, mode, dim, workspace);
        const detail::RowSegments segments = detail::sort_by_row(c, weights.size(0), workspace);
        detail::write_dense_gradient(c, segments, grad_out.data<float>(), *grad_weights);
    }
    if (grad_per_sample_weights != nullptr) {
        visit_float_dtype(weights.dtype(), [&](auto tag) {
            using Weight = typename decltype(tag)::type;
            per_sample_weight_grad(grad_out, weights.data<Weight>(), table_offsets, feature_table,
                                   ids, offsets, mode, dim, grad_per_sample_weights->data<float>());
        });
    }
}

void embedding_bag_backward_fused(const Tensor& grad_out,
                                  const Tensor& table_offsets,
                                  const Tensor& feature_table,
                                  const Tensor& ids,
                                  const Tensor& offsets,
                                  const Tensor* per_sample_weights,
                                  PoolingMode mode,
                                  const FusedOptimizerParams& optim,
                                  Tensor& weights,
                                  Tensor* state1,
                                  Tensor* state2,
                                  EmbeddingBackwardWorkspace& workspace) {
    const detail::RowContributions c =
        gather_pooled(table_offsets, feature_table, ids, offsets, per_sample_weights, mode,
                      weights.size(1), workspace);
    const detail::RowSegments segments = detail::sort_by_row(c, weights.size(0), workspace);
    detail::apply_fused_update(c, segments, grad_out.data<float>(), optim, weights, state1, state2,
                               workspace);
}

}  // namespace shardrec::kernels::cpu
