// Cache row moves: argument checks (all of them, once) and the device switch.
#include "kernels/cache_rows.h"

#include "engine/core/error.h"

namespace shardrec::kernels {

int64_t cache_payload_bytes(int64_t cols,
                            DType row_dtype,
                            int64_t state1_cols,
                            int64_t state2_cols) {
    return cols * static_cast<int64_t>(dtype_size(row_dtype)) + 4 * (state1_cols + state2_cols);
}

namespace {

bool is_float(DType t) {
    return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

CacheRowsArgs make_args(const Tensor& weights,
                        const Tensor* state1,
                        const Tensor* state2,
                        const Tensor& slots,
                        DType row_dtype,
                        const Tensor& payloads,
                        const char* what) {
    SR_CHECK(weights.dim() == 2 && is_float(weights.dtype()) && is_float(row_dtype),
             "{}: weights {} must be [capacity, cols] of f32, f16 or bf16", what, weights.str());
    SR_CHECK(slots.dim() == 1 && slots.dtype() == DType::kI64, "{}: slots {} must be [n] i64", what,
             slots.str());
    CacheRowsArgs a;
    a.weights = const_cast<void*>(weights.data_ptr());
    a.slot_dtype = weights.dtype();
    a.row_dtype = row_dtype;
    a.cols = weights.size(1);
    const int64_t capacity = weights.size(0);
    auto state = [&](const Tensor* s, bool per_row_ok, float** ptr, int64_t* cols) {
        if (s == nullptr || !s->defined())
            return;
        const bool per_row = per_row_ok && s->dim() == 1;
        SR_CHECK(s->dtype() == DType::kF32 && s->size(0) == capacity &&
                     (per_row || (s->dim() == 2 && s->size(1) == a.cols)),
                 "{}: optimizer state {} does not fit weights {}", what, s->str(), weights.str());
        SR_CHECK(s->device() == weights.device(), "{}: {} and {} are on different devices", what,
                 s->str(), weights.str());
        *ptr = const_cast<float*>(s->data<float>());
        *cols = per_row ? 1 : a.cols;
    };
    state(state1, true, &a.state1, &a.state1_cols);
    state(state2, false, &a.state2, &a.state2_cols);
    a.slots = slots.data<int64_t>();
    a.n = slots.numel();
    a.payload_bytes = cache_payload_bytes(a.cols, row_dtype, a.state1_cols, a.state2_cols);
    SR_CHECK(payloads.dtype() == DType::kU8 && payloads.numel() >= a.n * a.payload_bytes,
             "{}: payloads {} hold less than {} payloads of {} bytes", what, payloads.str(), a.n,
             a.payload_bytes);
    SR_CHECK(slots.device() == weights.device() && payloads.device() == weights.device(),
             "{}: slots {}, payloads {} and weights {} must be on one device", what, slots.str(),
             payloads.str(), weights.str());
    a.payloads = const_cast<uint8_t*>(payloads.data<uint8_t>());
    return a;
}

}  // namespace

void cache_rows_pack(const Tensor& weights,
                     const Tensor* state1,
                     const Tensor* state2,
                     const Tensor& slots,
                     DType row_dtype,
                     Tensor& payloads,
                     Stream& stream) {
    const CacheRowsArgs a =
        make_args(weights, state1, state2, slots, row_dtype, payloads, "cache_rows_pack");
    if (a.n == 0)
        return;
    switch (weights.device().type) {
        case DeviceType::kCpu:
            return cpu::cache_rows_pack(a);
        case DeviceType::kCuda:
            return cuda::cache_rows_pack(a, stream);
    }
}

void cache_rows_unpack(const Tensor& payloads,
                       const Tensor& slots,
                       DType row_dtype,
                       Tensor& weights,
                       Tensor* state1,
                       Tensor* state2,
                       Stream& stream) {
    const CacheRowsArgs a =
        make_args(weights, state1, state2, slots, row_dtype, payloads, "cache_rows_unpack");
    if (a.n == 0)
        return;
    switch (weights.device().type) {
        case DeviceType::kCpu:
            return cpu::cache_rows_unpack(a);
        case DeviceType::kCuda:
            return cuda::cache_rows_unpack(a, stream);
    }
}

}  // namespace shardrec::kernels
