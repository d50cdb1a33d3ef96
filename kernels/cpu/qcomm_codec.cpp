// Quantized communication codecs on the CPU: one row at a time (fp8 needs the row's amax first),
// rows in parallel.
#include "kernels/qcomm_codec.h"

#include <cmath>
#include <cstring>

namespace shardrec::kernels::cpu {
namespace {

constexpr int64_t kParallelValues = int64_t{1} << 16;

void encode_fp8_row(const float* x, int64_t cols, uint8_t* out) {
    float amax = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
        if (std::isfinite(x[j]))
            amax = std::fmax(amax, std::fabs(x[j]));
    }
    const float scale = amax / kFp8E4m3Max;
    for (int64_t j = 0; j < cols; ++j) {
        // x / 0 would be NaN or Inf: a zero scale encodes the finite values as 0.
        const float q = scale > 0.0f || !std::isfinite(x[j]) ? x[j] / scale : 0.0f;
        out[j] = float_to_fp8_e4m3(q);
    }
    std::memcpy(out + cols, &scale, sizeof(float));
}

void decode_fp8_row(const uint8_t* in, int64_t cols, float* out) {
    float scale;
    std::memcpy(&scale, in + cols, sizeof(float));
    for (int64_t j = 0; j < cols; ++j)
        out[j] = fp8_e4m3_to_float(in[j]) * scale;
}

}  // namespace

void qcomm_encode(const float* input, int64_t rows, int64_t cols, CommType type, uint8_t* out) {
    const int64_t row_bytes = qcomm_row_bytes(type, cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelValues)
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = input + r * cols;  // x is input[r, :], cols floats
        uint8_t* o = out + r * row_bytes;
        switch (type) {
            case CommType::kFp32:
                std::memcpy(o, x, static_cast<size_t>(row_bytes));
                break;
            case CommType::kFp16:
                for (int64_t j = 0; j < cols; ++j) {
                    const uint16_t h = float_to_half(x[j]).bits;
                    std::memcpy(o + 2 * j, &h, 2);
                }
                break;
            case CommType::kBf16:
                for (int64_t j = 0; j < cols; ++j) {
                    const uint16_t b = float_to_bf16(x[j]).bits;
                    std::memcpy(o + 2 * j, &b, 2);
                }
                break;
            case CommType::kFp8:
                encode_fp8_row(x, cols, o);
                break;
        }
    }
}

void qcomm_decode(const uint8_t* encoded, int64_t rows, int64_t cols, CommType type, float* out) {
    const int64_t row_bytes = qcomm_row_bytes(type, cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelValues)
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* in = encoded + r * row_bytes;
        float* y = out + r * cols;  // y is out[r, :], cols floats
        switch (type) {
            case CommType::kFp32:
                std::memcpy(y, in, static_cast<size_t>(row_bytes));
                break;
            case CommType::kFp16:
                for (int64_t j = 0; j < cols; ++j) {
                    Half h;
                    std::memcpy(&h.bits, in + 2 * j, 2);
                    y[j] = half_to_float(h);
                }
                break;
            case CommType::kBf16:
                for (int64_t j = 0; j < cols; ++j) {
                    BFloat16 b;
                    std::memcpy(&b.bits, in + 2 * j, 2);
                    y[j] = bf16_to_float(b);
                }
                break;
            case CommType::kFp8:
                decode_fp8_row(in, cols, y);
                break;
        }
    }
}

}  // namespace shardrec::kernels::cpu
