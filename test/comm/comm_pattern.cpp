#include "test/comm/comm_pattern.h"

#include <fmt/format.h>

#include <cstring>

#include "engine/core/rng.h"

namespace shardrec::test {

std::shared_ptr<comm::MpiProcessGroup> mpi_world() {
    auto world = std::dynamic_pointer_cast<comm::MpiProcessGroup>(comm::world_process_group());
    SR_CHECK(world != nullptr, "the world group is not an MpiProcessGroup");
    return world;
}

const std::vector<DType>& all_dtypes() {
    static const std::vector<DType> dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32,
                                              DType::kI64, DType::kI8,  DType::kU8};
    return dtypes;
}

const std::vector<DType>& reducible_dtypes() {
    static const std::vector<DType> dtypes = {DType::kF32, DType::kI32, DType::kI64, DType::kI8,
                                              DType::kU8};
    return dtypes;
}

int64_t pattern_value(uint64_t seed, int64_t src, int64_t slot, int64_t i, DType dtype) {
    const uint64_t h = rng::hash(seed, static_cast<uint64_t>(src), static_cast<uint64_t>(slot),
                                 static_cast<uint64_t>(i));
    return dtype == DType::kU8 ? static_cast<int64_t>(h % 5) : static_cast<int64_t>(h % 9) - 4;
}

int64_t pattern_count(uint64_t seed, int64_t a, int64_t b, int64_t max) {
    return static_cast<int64_t>(
        rng::hash(seed, 0x5eed, static_cast<uint64_t>(a), static_cast<uint64_t>(b)) %
        static_cast<uint64_t>(max));
}

double load_value(const Tensor& t, int64_t i) {
    switch (t.dtype()) {
        case DType::kF32:
            return t.data<float>()[i];
        case DType::kF16:
            return half_to_float(t.data<Half>()[i]);
        case DType::kBF16:
            return bf16_to_float(t.data<BFloat16>()[i]);
        case DType::kI32:
            return t.data<int32_t>()[i];
        case DType::kI64:
            return static_cast<double>(t.data<int64_t>()[i]);
        case DType::kI8:
            return t.data<int8_t>()[i];
        case DType::kU8:
            return t.data<uint8_t>()[i];
    }
    return 0;
}

void store_value(Tensor& t, int64_t i, double v) {
    switch (t.dtype()) {
        case DType::kF32:
            t.data<float>()[i] = static_cast<float>(v);
            return;
        case DType::kF16:
            t.data<Half>()[i] = float_to_half(static_cast<float>(v));
            return;
        case DType::kBF16:
            t.data<BFloat16>()[i] = float_to_bf16(static_cast<float>(v));
            return;
        case DType::kI32:
            t.data<int32_t>()[i] = static_cast<int32_t>(v);
            return;
        case DType::kI64:
            t.data<int64_t>()[i] = static_cast<int64_t>(v);
            return;
        case DType::kI8:
            t.data<int8_t>()[i] = static_cast<int8_t>(v);
            return;
        case DType::kU8:
            t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
            return;
    }
}

std::string first_mismatch(const Tensor& got, const Tensor& expected) {
    if (got.dtype() != expected.dtype() || got.numel() != expected.numel()) {
        return fmt::format("got {}, expected {}", got.str(), expected.str());
    }
    const size_t esize = dtype_size(got.dtype());
    const auto* g = static_cast<const char*>(got.data_ptr());
    const auto* e = static_cast<const char*>(expected.data_ptr());
    int64_t wrong = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < got.numel(); ++i) {
        if (std::memcmp(g + i * esize, e + i * esize, esize) != 0) {
            if (first < 0) {
                first = i;
            }
            ++wrong;
        }
    }
    if (wrong == 0) {
        return "";
    }
    return fmt::format("{} of {} {} elements differ; first at {}: got {}, expected {}", wrong,
                       got.numel(), dtype_name(got.dtype()), first, load_value(got, first),
                       load_value(expected, first));
}

}  // namespace shardrec::test
