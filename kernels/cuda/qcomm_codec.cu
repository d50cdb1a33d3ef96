// Quantized communication codecs on CUDA. fp16 and bf16: one thread per value. fp8: one warp per
// row; the lanes stride over the row's columns, the row's amax is a warp max (max is exact, so the
// order does not matter), lane 0 writes the scale. The same arithmetic as the CPU definition
// (IEEE division, no fast math), so both give the same bytes.
#include "kernels/cuda/common.cuh"
#include "kernels/qcomm_codec.h"

namespace shardrec::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = kBlockSize / kWarpSize;

__global__ void qcomm_encode_16bit_kernel(const float* x, int64_t n, bool bf16, uint16_t* out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        out[i] = bf16 ? from_f32<BFloat16>(x[i]).bits : from_f32<Half>(x[i]).bits;
    }
}

__global__ void qcomm_decode_16bit_kernel(const uint16_t* in, int64_t n, bool bf16, float* y) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        y[i] = bf16 ? to_f32(BFloat16{in[i]}) : to_f32(Half{in[i]});
    }
}

// The encoded rows are cols + 4 bytes long, so 16-bit and 32-bit stores would be misaligned:
// the 16-bit kernels above run only where rows are 2 * cols bytes (always 2-aligned), and the
// scale is written byte by byte.
__global__ void qcomm_encode_fp8_kernel(const float* input,
                                        int64_t rows,
                                        int64_t cols,
                                        uint8_t* out) {
    const int64_t r = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (r >= rows)
        return;
    const float* x = input + r * cols;  // x is input[r, :], cols floats
    uint8_t* o = out + r * (cols + 4);
    float amax = 0.0f;
    for (int64_t j = lane; j < cols; j += kWarpSize) {
        if (isfinite(x[j]))
            amax = fmaxf(amax, fabsf(x[j]));
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float scale = __fdiv_rn(amax, kFp8E4m3Max);
    for (int64_t j = lane; j < cols; j += kWarpSize) {
        const float q = scale > 0.0f || !isfinite(x[j]) ? __fdiv_rn(x[j], scale) : 0.0f;
        o[j] = float_to_fp8_e4m3(q);
    }
    if (lane == 0) {
        uint8_t bytes[4];
        memcpy(bytes, &scale, 4);
        for (int k = 0; k < 4; ++k)
            o[cols + k] = bytes[k];
    }
}

__global__ void qcomm_decode_fp8_kernel(const uint8_t* encoded,
                                        int64_t rows,
                                        int64_t cols,
                                        float* out) {
    const int64_t r = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (r >= rows)
        return;
    const uint8_t* in = encoded + r * (cols + 4);
    uint8_t bytes[4] = {in[cols], in[cols + 1], in[cols + 2], in[cols + 3]};
    float scale;
    memcpy(&scale, bytes, 4);
    for (int64_t j = lane; j < cols; j += kWarpSize)
        out[r * cols + j] = __fmul_rn(fp8_e4m3_to_float(in[j]), scale);
}

}  // namespace

void qcomm_encode(
    const float* input, int64_t rows, int64_t cols, CommType type, uint8_t* out, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    const int64_t n = rows * cols;
    switch (type) {
        case CommType::kFp32:
            SR_CUDA_CHECK(cudaMemcpyAsync(out, input, static_cast<size_t>(n) * sizeof(float),
                                          cudaMemcpyDeviceToDevice, s));
            return;
        case CommType::kFp16:
        case CommType::kBf16:
            qcomm_encode_16bit_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(
                input, n, type == CommType::kBf16, reinterpret_cast<uint16_t*>(out));
            break;
        case CommType::kFp8:
            qcomm_encode_fp8_kernel<<<blocks_for(rows, kRowsPerBlock), kBlockSize, 0, s>>>(
                input, rows, cols, out);
            break;
    }
    SR_CUDA_LAUNCH_CHECK(s);
}

void qcomm_decode(
    const uint8_t* encoded, int64_t rows, int64_t cols, CommType type, float* out, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    const int64_t n = rows * cols;
    switch (type) {
        case CommType::kFp32:
            SR_CUDA_CHECK(cudaMemcpyAsync(out, encoded, static_cast<size_t>(n) * sizeof(float),
                                          cudaMemcpyDeviceToDevice, s));
            return;
        case CommType::kFp16:
        case CommType::kBf16:
            qcomm_decode_16bit_kernel<<<blocks_for(n), kBlockSize, 0, s>>>(
                reinterpret_cast<const uint16_t*>(encoded), n, type == CommType::kBf16, out);
            break;
        case CommType::kFp8:
            qcomm_decode_fp8_kernel<<<blocks_for(rows, kRowsPerBlock), kBlockSize, 0, s>>>(
                encoded, rows, cols, out);
            break;
    }
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
