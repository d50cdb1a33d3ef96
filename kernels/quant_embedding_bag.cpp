// Quantized embedding tables: names, row sizes, argument checks (all of them, once, ids included)
// and the device switch.
#include "kernels/quant_embedding_bag.h"

#include <vector>

#include "engine/core/error.h"

namespace shardrec::kernels {

namespace {

constexpr QuantType kAllTypes[] = {QuantType::kF32,  QuantType::kF16,  QuantType::kInt8,
                                   QuantType::kInt4, QuantType::kInt2, QuantType::kFp8};

void check_cpu(const Tensor& t, const char* what, const char* name) {
    SR_CHECK(t.device().is_cpu(), "{}: {} {} is on {}; quantized tables run on the CPU only so far",
             what, name, t.str(), t.device().str());
}

void check_1d(const Tensor& t,
              DType dtype,
              const char* what,
              const char* name,
              Device device = Device::cpu()) {
    SR_CHECK(t.defined() && t.dtype() == dtype && t.dim() == 1, "{}: {} is {}, expected 1-D {}",
             what, name, t.defined() ? t.str() : "undefined", dtype_name(dtype));
    if (device.is_cpu())
        check_cpu(t, what, name);
    else
        SR_CHECK(t.device() == device, "{}: {} is on {}, the weights on {}", what, name,
                 t.device().str(), device.str());
}

Tensor on_host(const Tensor& t) {
    return t.device().is_cpu() ? t : t.to(Device::cpu());
}

}  // namespace

const char* quant_type_name(QuantType type) {
    switch (type) {
        case QuantType::kF32:
            return "f32";
        case QuantType::kF16:
            return "fp16";
        case QuantType::kInt8:
            return "int8";
        case QuantType::kInt4:
            return "int4";
        case QuantType::kInt2:
            return "int2";
        case QuantType::kFp8:
            return "fp8";
    }
    return "?";
}

QuantType quant_type_from_name(const std::string& name) {
    for (QuantType t : kAllTypes) {
        if (name == quant_type_name(t))
            return t;
    }
    SR_CHECK(false, "unknown weight type '{}' (expected f32, fp16, int8, int4, int2 or fp8)", name);
    return QuantType::kF32;
}

void quantize_rows(const Tensor& input, QuantType type, Tensor& out, Stream& /*stream*/) {
    SR_CHECK(input.defined() && input.dtype() == DType::kF32 && input.dim() == 2,
             "quantize_rows: input {} is not 2-D f32", input.defined() ? input.str() : "undefined");
    check_1d(out, DType::kU8, "quantize_rows", "out");
    check_cpu(input, "quantize_rows", "input");
    SR_CHECK(out.numel() == input.size(0) * quant_row_bytes(type, input.size(1)),
             "quantize_rows: {} bytes for {} rows of {} {} values (expected {})", out.numel(),
             input.size(0), input.size(1), quant_type_name(type),
             input.size(0) * quant_row_bytes(type, input.size(1)));
    cpu::quantize_rows(input.data<float>(), input.size(0), input.size(1), type,
                       out.data<uint8_t>());
}

void dequantize_rows(const Tensor& rows, QuantType type, Tensor& out, Stream& /*stream*/) {
    SR_CHECK(out.defined() && out.dtype() == DType::kF32 && out.dim() == 2,
             "dequantize_rows: out {} is not 2-D f32", out.defined() ? out.str() : "undefined");
    check_1d(rows, DType::kU8, "dequantize_rows", "rows");
    check_cpu(out, "dequantize_rows", "out");
    SR_CHECK(rows.numel() == out.size(0) * quant_row_bytes(type, out.size(1)),
             "dequantize_rows: {} bytes for {} rows of {} {} values (expected {})", rows.numel(),
             out.size(0), out.size(1), quant_type_name(type),
             out.size(0) * quant_row_bytes(type, out.size(1)));
    cpu::dequantize_rows(rows.data<uint8_t>(), out.size(0), out.size(1), type, out.data<float>());
}

void quant_embedding_bag_forward(const Tensor& weights,
                                 const Tensor& weights_offsets,
                                 const Tensor& weights_tys,
                                 const Tensor& D_offsets,
                                 const Tensor& feature_table,
                                 const Tensor& ids,
                                 const Tensor& offsets,
                                 const Tensor* per_sample_weights,
                                 PoolingMode mode,
                                 Tensor& out,
                                 Stream& stream) {
    const char* what = "quant_embedding_bag_forward";
    const Device device = weights.defined() ? weights.device() : Device::cpu();
    check_1d(weights, DType::kU8, what, "weights", device);
    check_1d(weights_offsets, DType::kI64, what, "weights_offsets", device);
    check_1d(weights_tys, DType::kU8, what, "weights_tys", device);
    check_1d(D_offsets, DType::kI32, what, "D_offsets", device);
    check_1d(feature_table, DType::kI32, what, "feature_table", device);
    check_1d(ids, DType::kI64, what, "ids", device);
    check_1d(offsets, DType::kI64, what, "offsets", device);
    const int64_t T = weights_tys.numel();
    const int64_t F = feature_table.numel();
    SR_CHECK(weights_offsets.numel() == T + 1 && D_offsets.numel() == T + 1,
             "{}: {} tables need weights_offsets and D_offsets of {} entries, got {} and {}", what,
             T, T + 1, weights_offsets.numel(), D_offsets.numel());
    SR_CHECK(F > 0 && offsets.numel() >= 1 && (offsets.numel() - 1) % F == 0,
             "{}: offsets has {} entries, not F*B + 1 for F = {}", what, offsets.numel(), F);
    const int64_t B = (offsets.numel() - 1) / F;
    const Tensor wo_host = on_host(weights_offsets), ty_host = on_host(weights_tys);
    const Tensor dof_host = on_host(D_offsets), ft_host = on_host(feature_table);
    const int64_t* wo = wo_host.data<int64_t>();
    const uint8_t* ty = ty_host.data<uint8_t>();
    const int32_t* dof = dof_host.data<int32_t>();
    std::vector<int64_t> rows(static_cast<size_t>(T));
    SR_CHECK(wo[0] == 0 && dof[0] == 0 && wo[T] == weights.numel(),
             "{}: weights_offsets must run from 0 to the {} weight bytes and D_offsets from 0",
             what, weights.numel());
    for (int64_t t = 0; t < T; ++t) {
        SR_CHECK(ty[t] <= static_cast<uint8_t>(QuantType::kFp8), "{}: table {} has type code {}",
                 what, t, ty[t]);
        const int64_t dim = dof[t + 1] - dof[t];
        const int64_t row_bytes = quant_row_bytes(static_cast<QuantType>(ty[t]), dim);
        const int64_t bytes = wo[t + 1] - wo[t];
        SR_CHECK(dim > 0 && bytes >= 0 && bytes % row_bytes == 0,
                 "{}: table {} ({} dim {}) has {} bytes, not whole rows of {}", what, t,
                 quant_type_name(static_cast<QuantType>(ty[t])), dim, bytes, row_bytes);
        rows[static_cast<size_t>(t)] = bytes / row_bytes;
    }
    int64_t cols = 0;
    const int32_t* ft = ft_host.data<int32_t>();
    for (int64_t f = 0; f < F; ++f) {
        SR_CHECK(ft[f] >= 0 && ft[f] < T, "{}: feature {} maps to table {} of {}", what, f, ft[f],
                 T);
        cols += dof[ft[f] + 1] - dof[ft[f]];
    }
    SR_CHECK(out.defined() && out.dtype() == DType::kF32 && out.shape() == Shape({B, cols}),
             "{}: out is {}, expected [{}, {}] f32", what, out.defined() ? out.str() : "undefined",
             B, cols);
    if (per_sample_weights != nullptr) {
        check_1d(*per_sample_weights, DType::kF32, what, "per_sample_weights", device);
        SR_CHECK(per_sample_weights->numel() == ids.numel(), "{}: {} per_sample_weights for {} ids",
                 what, per_sample_weights->numel(), ids.numel());
    }
    if (device.is_cuda()) {  // the ids are checked by the kernel, the offsets trusted
        SR_CHECK(out.device() == device, "{}: out is on {}, the weights on {}", what,
                 out.device().str(), device.str());
        return cuda::quant_embedding_bag_forward(weights, weights_offsets, weights_tys, D_offsets,
                                                 feature_table, ids, offsets, per_sample_weights,
                                                 mode, out, stream);
    }
    check_cpu(out, what, "out");
    const int64_t* off = offsets.data<int64_t>();
    const int64_t* id = ids.data<int64_t>();
    SR_CHECK(off[0] == 0 && off[F * B] == ids.numel(),
             "{}: offsets run from {} to {}, expected 0 to the {} ids", what, off[0], off[F * B],
             ids.numel());
    for (int64_t j = 0; j < F * B; ++j) {
        SR_CHECK(off[j + 1] >= off[j], "{}: offsets decrease at bag {}", what, j);
        const int64_t table_rows = rows[static_cast<size_t>(ft[j / B])];
        for (int64_t i = off[j]; i < off[j + 1]; ++i) {
            SR_CHECK(id[i] >= 0 && id[i] < table_rows,
                     "{}: feature {}, sample {}: id {} is outside table {}'s {} rows", what, j / B,
                     j % B, id[i], ft[j / B], table_rows);
        }
    }
    if (out.numel() == 0)
        return;
    cpu::quant_embedding_bag_forward(
        weights.data<uint8_t>(), wo, ty, dof, ft, F, id, off,
        per_sample_weights != nullptr ? per_sample_weights->data<float>() : nullptr, B, mode,
        out.data<float>(), cols);
}

}  // namespace shardrec::kernels
