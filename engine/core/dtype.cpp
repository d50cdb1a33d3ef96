#include "engine/core/dtype.h"

#include "engine/core/error.h"

namespace shardrec {

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::kF32:
        case DType::kI32:
            return 4;
        case DType::kF16:
        case DType::kBF16:
            return 2;
        case DType::kI64:
            return 8;
        case DType::kI8:
        case DType::kU8:
            return 1;
    }
    return 0;
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return "f32";
        case DType::kF16:
            return "f16";
        case DType::kBF16:
            return "bf16";
        case DType::kI32:
            return "i32";
        case DType::kI64:
            return "i64";
        case DType::kI8:
            return "i8";
        case DType::kU8:
            return "u8";
    }
    return "?";
}

DType dtype_from_name(const std::string& name) {
    if (name == "f32" || name == "fp32" || name == "float32")
        return DType::kF32;
    if (name == "f16" || name == "fp16" || name == "float16")
        return DType::kF16;
    if (name == "bf16" || name == "bfloat16")
        return DType::kBF16;
    if (name == "i32" || name == "int32")
        return DType::kI32;
    if (name == "i64" || name == "int64")
        return DType::kI64;
    if (name == "i8" || name == "int8")
        return DType::kI8;
    if (name == "u8" || name == "uint8")
        return DType::kU8;
    SR_CHECK(false, "unknown dtype '{}' (expected f32, f16, bf16, i32, i64, i8 or u8)", name);
    return DType::kF32;
}

bool is_floating(DType dtype) {
    return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// Bit-exact IEEE conversions (no F16C dependency, so results do not depend on the CPU).
float half_to_float(Half h) {
    const uint32_t sign = (h.bits & 0x8000u) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1fu;
    uint32_t mant = h.bits & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else {  // subnormal: normalise
            exp = 127 - 15 + 1;
            while ((mant & 0x400u) == 0) {
                mant <<= 1;
                --exp;
            }
            mant &= 0x3ffu;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

Half float_to_half(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return Half{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
    if (abs >= 0x477ff000u)
        return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow->inf
    if (abs < 0x38800000u) {                                 // the result is subnormal or zero
        if (abs < 0x33000000u)
            return Half{sign};
        const uint32_t exp = abs >> 23;
        const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // 24 significant bits
        const uint32_t shift = 13 + (113 - exp);              // 113 = 127 - 14
        uint32_t r = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (r & 1u)))
            ++r;
        return Half{static_cast<uint16_t>(sign | r)};
    }
    uint32_t r = ((abs >> 13) - ((127 - 15) << 10));
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        ++r;
    return Half{static_cast<uint16_t>(sign | r)};
}

}  // namespace shardrec
