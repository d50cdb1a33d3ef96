// Quantized communication codecs: names, sizes, argument checks (all of them, once) and the
// device switch.
#include "kernels/qcomm_codec.h"

#include "engine/core/error.h"

namespace shardrec::kernels {

const char* comm_type_name(CommType type) {
    switch (type) {
        case CommType::kFp32:
            return "fp32";
        case CommType::kFp16:
            return "fp16";
        case CommType::kBf16:
            return "bf16";
        case CommType::kFp8:
            return "fp8";
    }
    return "?";
}

CommType comm_type_from_name(const std::string& name) {
    for (CommType t : {CommType::kFp32, CommType::kFp16, CommType::kBf16, CommType::kFp8}) {
        if (name == comm_type_name(t))
            return t;
    }
    SR_CHECK(false, "unknown comm precision '{}' (expected fp32, fp16, bf16 or fp8)", name);
    return CommType::kFp32;
}

int64_t qcomm_row_bytes(CommType type, int64_t cols) {
    switch (type) {
        case CommType::kFp32:
            return 4 * cols;
        case CommType::kFp16:
        case CommType::kBf16:
            return 2 * cols;
        case CommType::kFp8:
            return cols == 0 ? 0 : cols + static_cast<int64_t>(sizeof(float));
    }
    return 0;
}

namespace {

void check_codec_args(const Tensor& f32, const Tensor& bytes, CommType type, const char* what) {
    SR_CHECK(f32.defined() && f32.dtype() == DType::kF32 && f32.dim() == 2, "{}: {} is not 2-D f32",
             what, f32.defined() ? f32.str() : "undefined");
    SR_CHECK(bytes.defined() && bytes.dtype() == DType::kU8, "{}: encoded {} is not u8", what,
             bytes.defined() ? bytes.str() : "undefined");
    SR_CHECK(bytes.numel() >= f32.size(0) * qcomm_row_bytes(type, f32.size(1)),
             "{}: {} bytes hold fewer than {} rows of {} {} values", what, bytes.numel(),
             f32.size(0), f32.size(1), comm_type_name(type));
    SR_CHECK(f32.device() == bytes.device(), "{}: {} and {} are on different devices", what,
             f32.str(), bytes.str());
}

}  // namespace

void qcomm_encode(const Tensor& input, CommType type, Tensor& encoded, Stream& stream) {
    check_codec_args(input, encoded, type, "qcomm_encode");
    if (input.numel() == 0)
        return;
    switch (input.device().type) {
        case DeviceType::kCpu:
            return cpu::qcomm_encode(input.data<float>(), input.size(0), input.size(1), type,
                                     encoded.data<uint8_t>());
        case DeviceType::kCuda:
            return cuda::qcomm_encode(input.data<float>(), input.size(0), input.size(1), type,
                                      encoded.data<uint8_t>(), stream);
    }
}

void qcomm_decode(const Tensor& encoded, CommType type, Tensor& output, Stream& stream) {
    check_codec_args(output, encoded, type, "qcomm_decode");
    if (output.numel() == 0)
        return;
    switch (output.device().type) {
        case DeviceType::kCpu:
            return cpu::qcomm_decode(encoded.data<uint8_t>(), output.size(0), output.size(1), type,
                                     output.data<float>());
        case DeviceType::kCuda:
            return cuda::qcomm_decode(encoded.data<uint8_t>(), output.size(0), output.size(1), type,
                                      output.data<float>(), stream);
    }
}

}  // namespace shardrec::kernels
