// Pooled embedding lookup: every argument check, once, then the switch on the device
// (STYLE.md R2). Backends assume what is checked here.
#include "kernels/embedding_bag.h"

#include <atomic>
#include <cmath>

namespace shardrec::kernels {
namespace {

void check_vector(const Tensor& t, const char* name, DType dtype, Device device) {
    SR_CHECK(t.defined(), "{} is undefined", name);
    SR_CHECK(t.dim() == 1 && t.dtype() == dtype, "{} must be a 1-d {} tensor, got {}", name,
             dtype_name(dtype), t.str());
    SR_CHECK(t.device() == device, "{} is on {}, weights on {}", name, t.device().str(),
             device.str());
}

void check_f32_matrix(
    const Tensor& t, const char* name, int64_t rows, int64_t cols, Device device) {
    SR_CHECK(t.defined(), "{} is undefined", name);
    SR_CHECK(t.dtype() == DType::kF32 && t.shape() == Shape({rows, cols}),
             "{} must be f32[{}, {}], got {}", name, rows, cols, t.str());
    SR_CHECK(t.device() == device, "{} is on {}, weights on {}", name, t.device().str(),
             device.str());
}

// The values of the index tensors; only possible where they are host-readable.
void check_index_values(const Tensor& weights,
                        const Tensor& table_offsets,
                        const Tensor& feature_table,
                        const Tensor& ids,
                        const Tensor& offsets) {
    const int64_t num_tables = table_offsets.numel() - 1;
    const int64_t num_features = feature_table.numel();
    const int64_t batch = (offsets.numel() - 1) / num_features;
    const int64_t* toff = table_offsets.data<int64_t>();
    SR_CHECK(toff[0] == 0 && toff[num_tables] == weights.size(0),
             "table_offsets must run from 0 to the {} weight rows, got {} .. {}", weights.size(0),
             toff[0], toff[num_tables]);
    for (int64_t t = 0; t < num_tables; ++t) {
        SR_CHECK(toff[t] <= toff[t + 1], "table_offsets decrease at table {}: {} > {}", t, toff[t],
                 toff[t + 1]);
    }
    const int32_t* ftab = feature_table.data<int32_t>();
    const int64_t* off = offsets.data<int64_t>();
    const int64_t* id = ids.data<int64_t>();
    SR_CHECK(off[0] == 0 && off[num_features * batch] == ids.numel(),
             "offsets must run from 0 to the {} ids, got {} .. {}", ids.numel(), off[0],
             off[num_features * batch]);
    for (int64_t f = 0; f < num_features; ++f) {
        const int32_t t = ftab[f];
        SR_CHECK(t >= 0 && t < num_tables, "feature {} maps to table {}, outside [0, {})", f, t,
                 num_tables);
        const int64_t rows = toff[t + 1] - toff[t];
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t j = f * batch + b;
            SR_CHECK(off[j] <= off[j + 1], "offsets decrease at bag {} (feature {}, sample {})", j,
                     f, b);
            for (int64_t n = off[j]; n < off[j + 1]; ++n) {
                SR_CHECK(id[n] >= 0 && id[n] < rows,
                         "feature {} sample {}: id {} out of range [0, {}) of table {}", f, b,
                         id[n], rows, t);
            }
        }
    }
}

int64_t batch_size(const Tensor& feature_table, const Tensor& offsets) {
    return (offsets.numel() - 1) / feature_table.numel();
}

}  // namespace

void check_embedding_lookup_args(const Tensor& weights,
                                 const Tensor& table_offsets,
                                 const Tensor& feature_table,
                                 const Tensor& ids,
                                 const Tensor& offsets,
                                 const Tensor* per_sample_weights) {
    SR_CHECK(weights.defined() && weights.dim() == 2 && is_floating(weights.dtype()),
             "weights must be a [sum E, D] f32/f16/bf16 tensor, got {}",
             weights.defined() ? weights.str() : "undefined");
    SR_CHECK(weights.size(1) >= 1, "weights must have D >= 1, got {}", weights.str());
    const Device device = weights.device();
    check_vector(table_offsets, "table_offsets", DType::kI64, device);
    check_vector(feature_table, "feature_table", DType::kI32, device);
    check_vector(ids, "ids", DType::kI64, device);
    check_vector(offsets, "offsets", DType::kI64, device);
    SR_CHECK(table_offsets.numel() >= 2, "table_offsets needs T + 1 >= 2 entries, got {}",
             table_offsets.numel());
    SR_CHECK(feature_table.numel() >= 1, "feature_table needs at least one feature");
    SR_CHECK(offsets.numel() >= 1 && (offsets.numel() - 1) % feature_table.numel() == 0,
             "offsets must have F * B + 1 entries with F = {}, got {}", feature_table.numel(),
             offsets.numel());
    if (per_sample_weights != nullptr) {
        check_vector(*per_sample_weights, "per_sample_weights", DType::kF32, device);
        SR_CHECK(per_sample_weights->numel() == ids.numel(),
                 "per_sample_weights has {} entries for {} ids", per_sample_weights->numel(),
                 ids.numel());
    }
    // On CUDA the index values stay on the device; the kernels report bad ids per bag there.
    if (device.is_cpu()) {
        check_index_values(weights, table_offsets, feature_table, ids, offsets);
    }
}

void check_fused_optimizer_args(const FusedOptimizerParams& optim,
                                const Tensor& weights,
                                const Tensor* state1,
                                const Tensor* state2) {
    SR_CHECK(
        std::isfinite(optim.learning_rate) && std::isfinite(optim.weight_decay) && optim.eps >= 0.f,
        "fused optimizer: bad hyper-parameters lr={} eps={} weight_decay={}", optim.learning_rate,
        optim.eps, optim.weight_decay);
    const int64_t rows = weights.size(0);
    const int64_t dim = weights.size(1);
    const int num_states = optim_num_states(optim.type);
    const char* name = optim_type_name(optim.type);
    SR_CHECK((state1 != nullptr) == (num_states >= 1) && (state2 != nullptr) == (num_states >= 2),
             "fused optimizer {} takes {} state tensors", name, num_states);
    auto check_state = [&](const Tensor* s, const Shape& shape) {
        SR_CHECK(
            s->dtype() == DType::kF32 && s->shape() == shape && s->device() == weights.device(),
            "fused optimizer {}: state must be f32{} on {}, got {}", name, shape_str(shape),
            weights.device().str(), s->str());
    };
    if (optim.type == OptimType::kExactRowWiseAdagrad) {
        check_state(state1, {rows});
    }
    if (optim.type == OptimType::kExactAdagrad || optim.type == OptimType::kAdam) {
        check_state(state1, {rows, dim});
    }
    if (optim.type == OptimType::kAdam) {
        check_state(state2, {rows, dim});
        SR_CHECK(optim.step >= 1 && optim.beta1 >= 0.f && optim.beta1 < 1.f && optim.beta2 >= 0.f &&
                     optim.beta2 < 1.f,
                 "fused adam: step must be >= 1 and betas in [0, 1), got step={} b1={} b2={}",
                 optim.step, optim.beta1, optim.beta2);
    }
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
    check_embedding_lookup_args(weights, table_offsets, feature_table, ids, offsets,
                                per_sample_weights);
    const int64_t batch = batch_size(feature_table, offsets);
    check_f32_matrix(out, "out", batch, feature_table.numel() * weights.size(1), weights.device());
    switch (weights.device().type) {
        case DeviceType::kCpu:
            return cpu::embedding_bag_forward(weights, table_offsets, feature_table, ids, offsets,
                                              per_sample_weights, mode, out);
        case DeviceType::kCuda:
            return cuda::embedding_bag_forward(weights, table_offsets, feature_table, ids, offsets,
                                               per_sample_weights, mode, out, stream);
    }
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
    check_embedding_lookup_args(weights, table_offsets, feature_table, ids, offsets,
                                per_sample_weights);
    const Device device = weights.device();
    const int64_t dim = weights.size(1);
    const int64_t batch = batch_size(feature_table, offsets);
    check_f32_matrix(grad_out, "grad_out", batch, feature_table.numel() * dim, device);
    if (grad_weights != nullptr) {
        check_f32_matrix(*grad_weights, "grad_weights", weights.size(0), dim, device);
    }
    if (grad_per_sample_weights != nullptr) {
        check_vector(*grad_per_sample_weights, "grad_per_sample_weights", DType::kF32, device);
        SR_CHECK(grad_per_sample_weights->numel() == ids.numel(),
                 "grad_per_sample_weights has {} entries for {} ids",
                 grad_per_sample_weights->numel(), ids.numel());
    }
    switch (device.type) {
        case DeviceType::kCpu:
            return cpu::embedding_bag_backward(grad_out, weights, table_offsets, feature_table, ids,
                                               offsets, per_sample_weights, mode, grad_weights,
                                               grad_per_sample_weights, workspace);
        case DeviceType::kCuda:
            return cuda::embedding_bag_backward(
                grad_out, weights, table_offsets, feature_table, ids, offsets, per_sample_weights,
                mode, grad_weights, grad_per_sample_weights, workspace, stream);
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
    check_embedding_lookup_args(weights, table_offsets, feature_table, ids, offsets,
                                per_sample_weights);
    check_fused_optimizer_args(optim, weights, state1, state2);
    const int64_t batch = batch_size(feature_table, offsets);
    check_f32_matrix(grad_out, "grad_out", batch, feature_table.numel() * weights.size(1),
                     weights.device());
    switch (weights.device().type) {
        case DeviceType::kCpu:
            return cpu::embedding_bag_backward_fused(grad_out, table_offsets, feature_table, ids,
                                                     offsets, per_sample_weights, mode, optim,
                                                     weights, state1, state2, workspace);
        case DeviceType::kCuda:
            return cuda::embedding_bag_backward_fused(grad_out, table_offsets, feature_table, ids,
                                                      offsets, per_sample_weights, mode, optim,
                                                      weights, state1, state2, workspace, stream);
    }
}

namespace {
std::atomic<HotRowUpdate> g_hot_row_update{HotRowUpdate::kChunked};
}  // namespace

const char* hot_row_update_name(HotRowUpdate mode) {
    return mode == HotRowUpdate::kBlock ? "block" : "chunked";
}

HotRowUpdate hot_row_update_from_name(const std::string& name) {
    for (HotRowUpdate m : {HotRowUpdate::kChunked, HotRowUpdate::kBlock}) {
        if (name == hot_row_update_name(m))
            return m;
    }
    SR_CHECK(false, "unknown hot-row update '{}' (chunked or block)", name);
    return HotRowUpdate::kChunked;
}

void set_hot_row_update(HotRowUpdate mode) {
    g_hot_row_update.store(mode);
}

HotRowUpdate hot_row_update() {
    return g_hot_row_update.load();
}

}  // namespace shardrec::kernels
