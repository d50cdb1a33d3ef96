// Pooled embedding lookup on CUDA, table-batched (FBGEMM TBE): every table of the group in one
// launch. Forward: G lanes per bag (G = D / V rounded up to a power of two <= 32, so small dims
// pack several bags per warp); each lane loads V elements of a row in one 16-byte load and keeps
// kRowsInFlight rows' loads outstanding before it adds them, in id order, in fp32. Backward:
// the sort-and-segment machinery of embedding_bag_update.cuh; the per-sample-weight gradient is
// a warp per id (a dot over D). Letters: F features, B batch, D dim, N ids.
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/embedding_bag_update.cuh"

namespace shardrec::kernels::cuda {
namespace {

constexpr int kRowsInFlight = 4;

// ---- forward ----

template <typename Weight, int V>
__global__ void embedding_bag_forward_kernel(
    LookupArgs a, const Weight* weights, int lanes_log2, bool mean, BadIdRecord* bad, float* out) {
    const int64_t thread = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t j = thread >> lanes_log2;  // bag j = f*B + b
    const int lane = static_cast<int>(thread & ((1 << lanes_log2) - 1));
    if (j >= a.num_features * a.batch) {
        return;
    }
    const int64_t f = j / a.batch;
    const int64_t b = j % a.batch;
    const int32_t t = a.feature_table[f];
    const Weight* table = weights + a.table_offsets[t] * a.dim;
    const int64_t rows = a.table_offsets[t + 1] - a.table_offsets[t];
    const int64_t begin = a.offsets[j];
    const int64_t end = a.offsets[j + 1];
    const float* psw = a.per_sample_weights;
    float* o = out + (b * a.num_features + f) * a.dim;  // out[b, f*D : (f+1)*D]
    const auto length = static_cast<float>(end - begin);
    const int64_t stride = static_cast<int64_t>(V) << lanes_log2;
    for (int64_t d0 = static_cast<int64_t>(lane) * V; d0 < a.dim; d0 += stride) {
        float acc[V] = {};
        for (int64_t n0 = begin; n0 < end; n0 += kRowsInFlight) {
            // Issue the loads of up to kRowsInFlight rows, then add them in id order.
            float r[kRowsInFlight][V];
            float w[kRowsInFlight];
            bool ok[kRowsInFlight];
            for (int u = 0; u < kRowsInFlight; ++u) {
                const int64_t n = n0 + u;
                ok[u] = false;
                if (n < end) {
                    const int64_t id = a.ids[n];
                    if (id >= 0 && id < rows) {
                        RowLoad<Weight, V>::load(table + id * a.dim + d0, r[u]);
                        w[u] = psw != nullptr ? psw[n] : 1.f;
                        ok[u] = true;
                    } else if (d0 == static_cast<int64_t>(lane) * V) {
                        record_bad_id(bad, f, b, id, rows);
                    }
                }
            }
            for (int u = 0; u < kRowsInFlight; ++u) {
                if (ok[u]) {
                    for (int v = 0; v < V; ++v) {
                        acc[v] += psw != nullptr ? w[u] * r[u][v] : r[u][v];
                    }
                }
            }
        }
        // MEAN: the same division the CPU backend does (sum, then / L).
        for (int v = 0; v < V; ++v) {
            acc[v] = mean && end > begin ? acc[v] / length : acc[v];
        }
        store_f32<V>(o + d0, acc);
    }
}

template <typename Weight, int V>
void launch_forward(const LookupArgs& a,
                    const Weight* weights,
                    bool mean,
                    BadIdRecord* bad,
                    float* out,
                    cudaStream_t s) {
    const int lanes = lanes_per_bag(a.dim, V);
    int lanes_log2 = 0;
    while ((1 << lanes_log2) < lanes) {
        ++lanes_log2;
    }
    const int64_t threads = (a.num_features * a.batch) << lanes_log2;
    embedding_bag_forward_kernel<Weight, V>
        <<<blocks_for(threads), kBlockSize, 0, s>>>(a, weights, lanes_log2, mean, bad, out);
    SR_CUDA_LAUNCH_CHECK(s);
}

// ---- per-sample-weight gradient ----

// A warp per id n: grad_psw[n] = dot(grad_out bag row, weight row) (/ L for MEAN); bad ids get 0.
template <typename Weight>
__global__ void per_sample_weight_grad_kernel(
    LookupArgs a, const Weight* weights, const float* grad_out, bool mean, float* grad_psw) {
    const int64_t n = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (n >= a.num_ids) {
        return;
    }
    const int64_t j = bag_of_id(a.offsets, a.num_features * a.batch, n);
    const int64_t f = j / a.batch;
    const int64_t b = j % a.batch;
    const int32_t t = a.feature_table[f];
    const int64_t rows = a.table_offsets[t + 1] - a.table_offsets[t];
    const int64_t id = a.ids[n];
    float dot = 0.f;
    if (id >= 0 && id < rows) {
        const Weight* row = weights + (a.table_offsets[t] + id) * a.dim;
        const float* g = grad_out + (b * a.num_features + f) * a.dim;
        for (int64_t d = lane; d < a.dim; d += kWarpSize) {
            dot += g[d] * to_f32(row[d]);
        }
    }
    dot = warp_sum(dot);
    if (lane == 0) {
        const auto length = static_cast<float>(a.offsets[j + 1] - a.offsets[j]);
        grad_psw[n] = mean ? dot / length : dot;
    }
}

}  // namespace

// ---- shared by the embedding entries ----

LookupArgs lookup_args(const Tensor& weights,
                       const Tensor& table_offsets,
                       const Tensor& feature_table,
                       const Tensor& ids,
                       const Tensor& offsets,
                       const Tensor* per_sample_weights) {
    const int64_t num_features = feature_table.numel();
    return LookupArgs{table_offsets.data<int64_t>(),
                      feature_table.data<int32_t>(),
                      ids.data<int64_t>(),
                      offsets.data<int64_t>(),
                      per_sample_weights ? per_sample_weights->data<float>() : nullptr,
                      num_features,
                      (offsets.numel() - 1) / num_features,
                      weights.size(1),
                      ids.numel(),
                      weights.size(0)};
}

BadIdRecord* bad_id_record(int device) {
    static std::mutex mutex;
    static std::unordered_map<int, BadIdRecord*> records;
    std::lock_guard<std::mutex> lock(mutex);
    BadIdRecord*& r = records[device];
    if (r == nullptr) {
        // Mapped pinned memory: kernels write it, the host reads it without a copy. Kept for the
        // life of the process.
        SR_CUDA_CHECK(cudaSetDevice(device));
        SR_CUDA_CHECK(
            cudaHostAlloc(reinterpret_cast<void**>(&r), sizeof(BadIdRecord), cudaHostAllocMapped));
        std::memset(r, 0, sizeof(BadIdRecord));
    }
    return r;
}

void throw_if_bad_id(int device) {
    BadIdRecord* r = bad_id_record(device);
    if (reinterpret_cast<volatile int32_t*>(&r->state)[0] != 2) {
        return;
    }
    const BadIdRecord seen = *r;
    std::memset(r, 0, sizeof(BadIdRecord));
    SR_CHECK(false,
             "embedding lookup on cuda:{}: feature {} sample {}: id {} out of range [0, {}) "
             "(found by an earlier kernel, which skipped it)",
             device, seen.feature, seen.sample, seen.id, seen.rows);
}

// ---- entries ----

void embedding_bag_forward(const Tensor& weights,
                           const Tensor& table_offsets,
                           const Tensor& feature_table,
                           const Tensor& ids,
                           const Tensor& offsets,
                           const Tensor* per_sample_weights,
                           PoolingMode mode,
                           Tensor& out,
                           Stream& stream) {
    throw_if_bad_id(weights.device().index);
    const LookupArgs a =
        lookup_args(weights, table_offsets, feature_table, ids, offsets, per_sample_weights);
    if (a.num_features * a.batch == 0) {
        return;
    }
    const cudaStream_t s = cuda_stream(stream);
    const bool mean = mode == PoolingMode::kMean;
    BadIdRecord* bad = bad_id_record(weights.device().index);
    float* o = out.data<float>();
    visit_float_dtype(weights.dtype(), [&](auto tag) {
        using Weight = typename decltype(tag)::type;
        const Weight* w = weights.data<Weight>();
        if (rows_vectorizable<Weight>(a.dim, w, o)) {
            launch_forward<Weight, kVecWidth<Weight>>(a, w, mean, bad, o, s);
        } else {
            launch_forward<Weight, 1>(a, w, mean, bad, o, s);
        }
    });
}

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
                            EmbeddingBackwardWorkspace& workspace,
                            Stream& stream) {
    throw_if_bad_id(weights.device().index);
    const LookupArgs a =
        lookup_args(weights, table_offsets, feature_table, ids, offsets, per_sample_weights);
    if (grad_weights != nullptr) {
        const RowSegments sg = sort_contributions(a, true, mode, workspace, stream);
        write_dense_gradient(sg, grad_out.data<float>(), *grad_weights, stream);
    }
    if (grad_per_sample_weights != nullptr && a.num_ids > 0) {
        const cudaStream_t s = cuda_stream(stream);
        visit_float_dtype(weights.dtype(), [&](auto tag) {
            using Weight = typename decltype(tag)::type;
            per_sample_weight_grad_kernel<Weight>
                <<<blocks_for(a.num_ids * kWarpSize), kBlockSize, 0, s>>>(
                    a, weights.data<Weight>(), grad_out.data<float>(), mode == PoolingMode::kMean,
                    grad_per_sample_weights->data<float>());
            SR_CUDA_LAUNCH_CHECK(s);
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
                                  EmbeddingBackwardWorkspace& workspace,
                                  Stream& stream) {
    throw_if_bad_id(weights.device().index);
    const LookupArgs a =
        lookup_args(weights, table_offsets, feature_table, ids, offsets, per_sample_weights);
    const RowSegments sg = sort_contributions(a, true, mode, workspace, stream);
    apply_fused_update(sg, grad_out.data<float>(), optim, weights, state1, state2, stream);
}

}  // namespace shardrec::kernels::cuda
