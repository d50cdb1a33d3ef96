// Sequence (non-pooled) embedding lookup on CUDA. Forward: G lanes per id (as the pooled
// forward's lanes per bag), each id's bag (hence feature and table) found by a binary search of
// offsets; rows are read in 16-byte loads and written upcast to fp32. Backward: the shared
// sort-and-segment update of embedding_bag_update.cuh with one gradient row per id.
#include "kernels/cuda/embedding_bag_update.cuh"
#include "kernels/sequence_embedding.h"

namespace shardrec::kernels::cuda {
namespace {

template <typename Weight, int V>
__global__ void sequence_embedding_forward_kernel(
    LookupArgs a, const Weight* weights, int lanes_log2, BadIdRecord* bad, float* out) {
    const int64_t thread = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t n = thread >> lanes_log2;
    const int lane = static_cast<int>(thread & ((1 << lanes_log2) - 1));
    if (n >= a.num_ids) {
        return;
    }
    const int64_t j = bag_of_id(a.offsets, a.num_features * a.batch, n);
    const int64_t f = j / a.batch;
    const int32_t t = a.feature_table[f];
    const int64_t rows = a.table_offsets[t + 1] - a.table_offsets[t];
    const int64_t id = a.ids[n];
    const bool valid = id >= 0 && id < rows;
    if (!valid && lane == 0) {
        record_bad_id(bad, f, j % a.batch, id, rows);
    }
    const Weight* row = weights + (a.table_offsets[t] + (valid ? id : 0)) * a.dim;
    float* o = out + n * a.dim;  // out[n, :]
    for (int64_t d0 = static_cast<int64_t>(lane) * V; d0 < a.dim; d0 += int64_t{V} << lanes_log2) {
        float r[V] = {};
        if (valid) {
            RowLoad<Weight, V>::load(row + d0, r);
        }
        store_f32<V>(o + d0, r);
    }
}

template <typename Weight, int V>
void launch_forward(
    const LookupArgs& a, const Weight* weights, BadIdRecord* bad, float* out, cudaStream_t s) {
    const int lanes = lanes_per_bag(a.dim, V);
    int lanes_log2 = 0;
    while ((1 << lanes_log2) < lanes) {
        ++lanes_log2;
    }
    sequence_embedding_forward_kernel<Weight, V>
        <<<blocks_for(a.num_ids << lanes_log2), kBlockSize, 0, s>>>(a, weights, lanes_log2, bad,
                                                                    out);
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace

void sequence_embedding_forward(const Tensor& weights,
                                const Tensor& table_offsets,
                                const Tensor& feature_table,
                                const Tensor& ids,
                                const Tensor& offsets,
                                Tensor& out,
                                Stream& stream) {
    throw_if_bad_id(weights.device().index);
    const LookupArgs a = lookup_args(weights, table_offsets, feature_table, ids, offsets, nullptr);
    if (a.num_ids == 0) {
        return;
    }
    const cudaStream_t s = cuda_stream(stream);
    BadIdRecord* bad = bad_id_record(weights.device().index);
    float* o = out.data<float>();
    visit_float_dtype(weights.dtype(), [&](auto tag) {
        using Weight = typename decltype(tag)::type;
        const Weight* w = weights.data<Weight>();
        if (rows_vectorizable<Weight>(a.dim, w, o)) {
            launch_forward<Weight, kVecWidth<Weight>>(a, w, bad, o, s);
        } else {
            launch_forward<Weight, 1>(a, w, bad, o, s);
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
                                       EmbeddingBackwardWorkspace& workspace,
                                       Stream& stream) {
    throw_if_bad_id(weights.device().index);
    const LookupArgs a = lookup_args(weights, table_offsets, feature_table, ids, offsets, nullptr);
    const RowSegments sg = sort_contributions(a, false, PoolingMode::kSum, workspace, stream);
    apply_fused_update(sg, grad_out.data<float>(), optim, weights, state1, state2, stream);
}

}  // namespace shardrec::kernels::cuda
