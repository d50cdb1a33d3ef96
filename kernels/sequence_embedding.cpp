// Sequence embedding lookup: argument checks (the layout checks are embedding_bag's), then the
// switch on the device (STYLE.md R2).
#include "kernels/sequence_embedding.h"

namespace shardrec::kernels {
namespace {

void check_rows_per_id(const Tensor& t,
                       const char* name,
                       const Tensor& weights,
                       const Tensor& ids) {
    SR_CHECK(t.defined() && t.dtype() == DType::kF32 &&
                 t.shape() == Shape({ids.numel(), weights.size(1)}),
             "{} must be f32[{}, {}] (one row per id), got {}", name, ids.numel(), weights.size(1),
             t.defined() ? t.str() : "undefined");
    SR_CHECK(t.device() == weights.device(), "{} is on {}, weights on {}", name, t.device().str(),
             weights.device().str());
}

}  // namespace

void sequence_embedding_forward(const Tensor& weights,
                                const Tensor& table_offsets,
                                const Tensor& feature_table,
                                const Tensor& ids,
                                const Tensor& offsets,
                                Tensor& out,
                                Stream& stream) {
    check_embedding_lookup_args(weights, table_offsets, feature_table, ids, offsets, nullptr);
    check_rows_per_id(out, "out", weights, ids);
    switch (weights.device().type) {
        case DeviceType::kCpu:
            return cpu::sequence_embedding_forward(weights, table_offsets, feature_table, ids,
                                                   offsets, out);
        case DeviceType::kCuda:
            return cuda::sequence_embedding_forward(weights, table_offsets, feature_table, ids,
                                                    offsets, out, stream);
    }
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
    check_embedding_lookup_args(weights, table_offsets, feature_table, ids, offsets, nullptr);
    check_fused_optimizer_args(optim, weights, state1, state2);
    check_rows_per_id(grad_out, "grad_out", weights, ids);
    switch (weights.device().type) {
        case DeviceType::kCpu:
            return cpu::sequence_embedding_backward_fused(grad_out, table_offsets, feature_table,
                                                          ids, offsets, optim, weights, state1,
                                                          state2, workspace);
        case DeviceType::kCuda:
            return cuda::sequence_embedding_backward_fused(grad_out, table_offsets, feature_table,
                                                           ids, offsets, optim, weights, state1,
                                                           state2, workspace, stream);
    }
}

}  // namespace shardrec::kernels
