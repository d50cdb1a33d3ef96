// Parameter initialisation and buffer reuse for the dense modules. Every initial value is a pure
// function of (seed, hash of the parameter's full dotted name, element index), so a parameter is
// the same whatever the rank, the world size or the order modules are built in.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "engine/core/rng.h"
#include "engine/core/tensor.h"

namespace shardrec::init {

// "<prefix>.<local>", or just local when the module has no prefix (a top-level module).
inline std::string param_name(const std::string& prefix, const std::string& local) {
    return prefix.empty() ? local : prefix + "." + local;
}

// FNV-1a, 64-bit: a stable hash of a parameter name (std::hash is not stable across builds).
inline uint64_t name_hash(const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : name) {
        h = (h ^ c) * 0x100000001b3ull;
    }
    return h;
}

// f32 tensor of U(-bound, bound), element i from (seed, name_hash(name), i).
inline Tensor uniform(const Shape& shape, float bound, uint64_t seed, const std::string& name) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    float* p = t.data<float>();
    const uint64_t key = name_hash(name);
    for (int64_t i = 0; i < t.numel(); ++i) {
        const double u = rng::uniform(seed, key, static_cast<uint64_t>(i));
        p[i] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
    return t;
}

// PyTorch's nn.Linear default for weight and bias (kaiming_uniform with a = sqrt(5) gives the
// same bound): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
inline float linear_bound(int64_t fan_in) {
    return 1.0f / std::sqrt(static_cast<float>(fan_in));
}

inline Tensor constant(const Shape& shape, float value) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
        p[i] = value;
    }
    return t;
}

// Makes `buffer` an f32 tensor of `shape` on `device`, reusing its storage when it already is
// one: modules call this every step, so a steady batch shape allocates nothing after step one.
inline Tensor& reuse_or_allocate(Tensor& buffer, const Shape& shape, Device device) {
    if (!buffer.defined() || buffer.shape() != shape || buffer.device() != device ||
        buffer.dtype() != DType::kF32) {
        buffer = Tensor::empty(shape, DType::kF32, device);
    }
    return buffer;
}

}  // namespace shardrec::init
