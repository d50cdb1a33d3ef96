// Element types, their sizes and names, and the 16-bit float formats with exact conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace shardrec {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kI8, kU8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
DType dtype_from_name(const std::string& name);  // "f32", "fp16", "bf16", ... ; throws if unknown
bool is_floating(DType dtype);

// IEEE binary16, stored as bits. Conversions round to nearest even.
struct Half {
    uint16_t bits = 0;
};

// bfloat16 (the top half of a float32), stored as bits. Conversions round to nearest even.
struct BFloat16 {
    uint16_t bits = 0;
};

float half_to_float(Half h);
Half float_to_half(float f);

inline float bf16_to_float(BFloat16 b) {
    uint32_t u = static_cast<uint32_t>(b.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline BFloat16 float_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40)};  // quiet NaN
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return BFloat16{static_cast<uint16_t>(u >> 16)};
}

// Upcasts of every float storage type, used by kernels templated on the storage type.
inline float to_float(float x) {
    return x;
}

inline float to_float(Half x) {
    return half_to_float(x);
}

inline float to_float(BFloat16 x) {
    return bf16_to_float(x);
}

template <typename T>
T from_float(float x);

template <>
inline float from_float<float>(float x) {
    return x;
}

template <>
inline Half from_float<Half>(float x) {
    return float_to_half(x);
}

template <>
inline BFloat16 from_float<BFloat16>(float x) {
    return float_to_bf16(x);
}

template <typename T>
constexpr DType dtype_of();

template <>
constexpr DType dtype_of<float>() {
    return DType::kF32;
}

template <>
constexpr DType dtype_of<Half>() {
    return DType::kF16;
}

template <>
constexpr DType dtype_of<BFloat16>() {
    return DType::kBF16;
}

template <>
constexpr DType dtype_of<int32_t>() {
    return DType::kI32;
}

template <>
constexpr DType dtype_of<int64_t>() {
    return DType::kI64;
}

template <>
constexpr DType dtype_of<int8_t>() {
    return DType::kI8;
}

template <>
constexpr DType dtype_of<uint8_t>() {
    return DType::kU8;
}

template <typename T>
struct TypeTag {
    using type = T;
};

// Calls fn(TypeTag<T>{}) with T the storage type of a float dtype (f32, f16, bf16).
template <typename Fn>
decltype(auto) visit_float_dtype(DType dtype, Fn&& fn);

}  // namespace shardrec

#include "engine/core/error.h"

namespace shardrec {

template <typename Fn>
decltype(auto) visit_float_dtype(DType dtype, Fn&& fn) {
    switch (dtype) {
        case DType::kF32:
            return fn(TypeTag<float>{});
        case DType::kF16:
            return fn(TypeTag<Half>{});
        case DType::kBF16:
            return fn(TypeTag<BFloat16>{});
        default:
            break;
    }
    SR_CHECK(false, "expected a float dtype (f32, f16, bf16), got {}", dtype_name(dtype));
    return fn(TypeTag<float>{});
}

}  // namespace shardrec
