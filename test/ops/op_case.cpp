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

void OpCase::set_device(Device device) {
    if (stream_ != nullptr && stream_->device() != device) {
        stream_.reset();
    }
    device_ = device;
    inputs_.clear();
}

Stream& OpCase::stream() {
    if (device_.is_cpu()) {
        return Stream::cpu();
    }
    if (stream_ == nullptr) {
        stream_ = std::make_unique<Stream>(device_);
    }
    return *stream_;
}

Tensor& OpCase::in(const Tensor& host) {
    for (Input& i : inputs_) {
        if (i.host.data_ptr() == host.data_ptr() && i.host.shape() == host.shape() &&
            i.host.dtype() == host.dtype()) {
            return *i.on_device;
        }
    }
    // The entry keeps `host` alive, so its address cannot be reused by another buffer.
    auto on_device = std::make_unique<Tensor>(device_.is_cpu() ? host : host.to(device_));
    inputs_.push_back({host, std::move(on_device)});
    return *inputs_.back().on_device;
}

void OpCase::clear_outputs() {
    spare_.clear();
    if (reuse_outputs_) {
        spare_.swap(guarded_);
    }
    guarded_.clear();
}

Tensor OpCase::make_output(const Shape& shape, DType dtype) {
    const size_t data_bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    for (size_t i = 0; i < spare_.size(); ++i) {
        if (spare_[i].data_bytes == data_bytes && spare_[i].buffer.device() == device_) {
            guarded_.push_back(spare_[i]);
            spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
            auto* p = static_cast<uint8_t*>(guarded_.back().buffer.data_ptr());
            return Tensor::from_blob(p + kGuardBytes, shape, dtype, device_);
        }
    }
    Tensor buffer = Tensor::empty({static_cast<int64_t>(data_bytes + 2 * kGuardBytes)}, DType::kU8);
    uint8_t* p = buffer.data<uint8_t>();
    std::memset(p, kGuardByte, kGuardBytes);
    std::memset(p + kGuardBytes, 0xFF, data_bytes);  // NaN for floats, -1 for integers
    std::memset(p + kGuardBytes + data_bytes, kGuardByte, kGuardBytes);
    if (!device_.is_cpu()) {
        buffer = buffer.to(device_);  // guards and poison travel with the buffer
        p = static_cast<uint8_t*>(buffer.data_ptr());
    }
    guarded_.push_back({buffer, data_bytes});
    return Tensor::from_blob(p + kGuardBytes, shape, dtype, device_);
}

Tensor OpCase::make_output_like(const Tensor& init) {
    Tensor t = make_output(init.shape(), init.dtype());
    t.copy_from(in(init));  // from the run's device: a timed run holds no host-to-device copy
    return t;
}

std::string OpCase::check_guards() const {
    for (size_t i = 0; i < guarded_.size(); ++i) {
        const Tensor& buffer = guarded_[i].buffer;
        const Tensor host = buffer.device().is_cpu() ? buffer : buffer.to(Device::cpu());
        const uint8_t* p = host.data<uint8_t>();
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

CaseRun run_case(OpCase& c, Device device, uint64_t seed) {
    c.make_inputs(seed);
    c.set_device(device);
    c.clear_outputs();
    const std::vector<Tensor> got = c.run(device);
    c.stream().synchronize();
    CaseRun r;
    r.guards = c.check_guards();
    for (const Tensor& t : got) {
        r.outputs.push_back(to_double(t));
    }
    return r;
}

namespace {

double element(const Tensor& h, int64_t i) {
    switch (h.dtype()) {
        case DType::kF32:
            return h.data<float>()[i];
        case DType::kF16:
            return half_to_float(h.data<Half>()[i]);
        case DType::kBF16:
            return bf16_to_float(h.data<BFloat16>()[i]);
        case DType::kI32:
            return h.data<int32_t>()[i];
        case DType::kI64:
            return static_cast<double>(h.data<int64_t>()[i]);
        case DType::kI8:
            return h.data<int8_t>()[i];
        case DType::kU8:
            return h.data<uint8_t>()[i];
    }
    return 0;
}

}  // namespace

std::vector<double> to_double(const Tensor& t) {
    const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
    std::vector<double> out(static_cast<size_t>(h.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
        out[i] = element(h, static_cast<int64_t>(i));
    }
    return out;
}

std::vector<double> to_double(const Tensor& t, const std::vector<int64_t>& index) {
    const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
    const int64_t n = h.numel();
    std::vector<double> out(index.size());
    for (size_t i = 0; i < out.size(); ++i) {
        SR_CHECK(index[i] >= 0 && index[i] < n, "to_double: element {} of {}", index[i], h.str());
        out[i] = element(h, index[i]);
    }
    return out;
}

std::vector<float> checked_values(const std::vector<double>& got, const RefOutput& ref) {
    if (ref.index.empty()) {
        return std::vector<float>(got.begin(), got.end());
    }
    std::vector<float> out(ref.index.size());
    for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<float>(got[static_cast<size_t>(ref.index[i])]);
    }
    return out;
}

}  // namespace shardrec::test
