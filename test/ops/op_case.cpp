#include "test/ops/op_case.h"

#include <cstring>

namespace shardrec::test {
namespace {

constexpr size_t kGuardBytes = 256;
constexpr uint8_t kGuardByte = 0xA5;

std::vector<OpCaseFactory>& factories() {
    static std::vector<OpCaseFactory> f;
    return f;
}

}  // namespace

Tolerance OpCase::tolerance(size_t output) const {
    Tolerance t;
    t.terms = terms(output);
    return t;
}

Tensor OpCase::make_output(const Shape& shape, DType dtype) {
    const size_t data_bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    Tensor buffer = Tensor::empty({static_cast<int64_t>(data_bytes + 2 * kGuardBytes)}, DType::kU8);
    uint8_t* p = buffer.data<uint8_t>();
    std::memset(p, kGuardByte, kGuardBytes);
    std::memset(p + kGuardBytes, 0xFF, data_bytes);  // NaN for floats, -1 for integers
    std::memset(p + kGuardBytes + data_bytes, kGuardByte, kGuardBytes);
    guarded_.push_back({buffer, data_bytes});
    return Tensor::from_blob(p + kGuardBytes, shape, dtype);
}

Tensor OpCase::make_output_like(const Tensor& init) {
    Tensor t = make_output(init.shape(), init.dtype());
    t.copy_from(init);
    return t;
}

std::string OpCase::check_guards() const {
    for (size_t i = 0; i < guarded_.size(); ++i) {
        const uint8_t* p = guarded_[i].buffer.data<uint8_t>();
        const size_t n = guarded_[i].data_bytes;
        for (size_t j = 0; j < kGuardBytes; ++j) {
            if (p[j] != kGuardByte)
                return fmt::format("output {}: write before the start", i);
            if (p[kGuardBytes + n + j] != kGuardByte) {
                return fmt::format("output {}: write past the end", i);
            }
        }
    }
    return {};
}

RegisterOpCases::RegisterOpCases(OpCaseFactory factory) {
    factories().push_back(std::move(factory));
}

std::vector<std::unique_ptr<OpCase>> all_op_cases() {
    std::vector<std::unique_ptr<OpCase>> all;
    for (auto& f : factories()) {
        for (auto& c : f())
            all.push_back(std::move(c));
    }
    return all;
}

std::vector<double> to_double(const Tensor& t) {
    const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
    std::vector<double> out(static_cast<size_t>(h.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
        switch (h.dtype()) {
            case DType::kF32:
                out[i] = h.data<float>()[i];
                break;
            case DType::kF16:
                out[i] = half_to_float(h.data<Half>()[i]);
                break;
            case DType::kBF16:
                out[i] = bf16_to_float(h.data<BFloat16>()[i]);
                break;
            case DType::kI32:
                out[i] = h.data<int32_t>()[i];
                break;
            case DType::kI64:
                out[i] = static_cast<double>(h.data<int64_t>()[i]);
                break;
            case DType::kI8:
                out[i] = h.data<int8_t>()[i];
                break;
            case DType::kU8:
                out[i] = h.data<uint8_t>()[i];
                break;
        }
    }
    return out;
}

}  // namespace shardrec::test
