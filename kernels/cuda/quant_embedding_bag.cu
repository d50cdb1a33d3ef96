// The quantized pooled lookup on CUDA (kernels/quant_embedding_bag.h): a warp per bag, its lanes
// over the columns; each column sums its bag's ids in id order in f32, so the result is bitwise
// repeatable (the decode and the products may fuse into FMAs: the last bits can differ from the
// CPU's). Out-of-range ids are skipped and the first is reported at the next embedding call on
// the device (embedding_lookup.cuh's bad-id record), as the f32 lookup does.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding_lookup.cuh"
#include "kernels/qcomm_codec.h"
#include "kernels/quant_embedding_bag.h"

namespace shardrec::kernels::cuda {
namespace {

__device__ __forceinline__ float load_half(const uint8_t* p) {
    return __half2float(__ushort_as_half(static_cast<uint16_t>(p[0] | (p[1] << 8))));
}

// Element d of a stored row, as the CPU's row_value (kernels/cpu/quant_embedding_bag.cpp).
__device__ __forceinline__ float row_value(
    QuantType type, const uint8_t* row, int64_t d, float scale, float bias) {
    switch (type) {
        case QuantType::kF32: {
            float v;
            memcpy(&v, row + 4 * d, 4);
            return v;
        }
        case QuantType::kF16:
            return load_half(row + 2 * d);
        case QuantType::kFp8:
            return fp8_e4m3_to_float(row[kQuantFp8ScaleBytes + d]) * scale;
        default: {
            const int bits = quant_type_bits(type);
            const int per_byte = 8 / bits;
            const uint8_t byte = row[kQuantScaleBiasBytes + d / per_byte];
            const int code = (byte >> ((d % per_byte) * bits)) & ((1 << bits) - 1);
            return static_cast<float>(code) * scale + bias;
        }
    }
}

__device__ __forceinline__ void scale_bias(QuantType type,
                                           const uint8_t* row,
                                           float& scale,
                                           float& bias) {
    if (type == QuantType::kFp8) {
        memcpy(&scale, row, sizeof(float));
    } else if (type != QuantType::kF32 && type != QuantType::kF16) {
        scale = load_half(row);
        bias = load_half(row + 2);
    }
}

struct QuantLookupArgs {
    const uint8_t* weights;
    const int64_t* weights_offsets;  // [T + 1]
    const uint8_t* weights_tys;      // [T]
    const int32_t* D_offsets;        // [T + 1]
    const int32_t* feature_table;    // [F]
    const int64_t* ids;
    const int64_t* offsets;           // [F * B + 1]
    const float* per_sample_weights;  // or null
    int64_t num_features, batch, out_cols;
    bool mean;
};

__global__ void quant_embedding_bag_forward_kernel(QuantLookupArgs a,
                                                   BadIdRecord* bad,
                                                   float* out) {
    const int64_t j = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (j >= a.num_features * a.batch) {
        return;
    }
    const int64_t f = j / a.batch, b = j % a.batch;
    int64_t col = 0;  // feature f's first output column
    for (int64_t g = 0; g < f; ++g) {
        col += a.D_offsets[a.feature_table[g] + 1] - a.D_offsets[a.feature_table[g]];
    }
    const int32_t t = a.feature_table[f];
    const auto type = static_cast<QuantType>(a.weights_tys[t]);
    const int64_t dim = a.D_offsets[t + 1] - a.D_offsets[t];
    const int64_t row_bytes = quant_row_bytes(type, dim);
    const int64_t rows = (a.weights_offsets[t + 1] - a.weights_offsets[t]) / row_bytes;
    const uint8_t* table = a.weights + a.weights_offsets[t];
    const int64_t begin = a.offsets[j], end = a.offsets[j + 1];
    float* o = out + b * a.out_cols + col;
    for (int64_t d = lane; d < dim; d += kWarpSize) {
        float acc = 0.f;
        for (int64_t i = begin; i < end; ++i) {
            const int64_t id = a.ids[i];
            if (id < 0 || id >= rows) {
                if (d == lane) {
                    record_bad_id(bad, f, b, id, rows);
                }
                continue;
            }
            const uint8_t* row = table + id * row_bytes;
            float scale = 0.f, bias = 0.f;
            scale_bias(type, row, scale, bias);
            const float w = a.per_sample_weights != nullptr ? a.per_sample_weights[i] : 1.f;
            acc += w * row_value(type, row, d, scale, bias);
        }
        if (a.mean && end > begin) {
            acc /= static_cast<float>(end - begin);
        }
        o[d] = acc;
    }
}

}  // namespace

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
    const int device = weights.device().index;
    throw_if_bad_id(device);
    const QuantLookupArgs a{weights.data<uint8_t>(),
                            weights_offsets.data<int64_t>(),
                            weights_tys.data<uint8_t>(),
                            D_offsets.data<int32_t>(),
                            feature_table.data<int32_t>(),
                            ids.data<int64_t>(),
                            offsets.data<int64_t>(),
                            per_sample_weights ? per_sample_weights->data<float>() : nullptr,
                            feature_table.numel(),
                            out.size(0),
                            out.size(1),
                            mode == PoolingMode::kMean};
    const int64_t bags = a.num_features * a.batch;
    if (bags == 0) {
        return;
    }
    const cudaStream_t s = cuda_stream(stream);
    quant_embedding_bag_forward_kernel<<<blocks_for(bags * kWarpSize), kBlockSize, 0, s>>>(
        a, bad_id_record(device), out.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
