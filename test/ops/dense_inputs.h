// Inputs and reference outputs of the dense op cases (cases_crossnet.cpp, cases_linear.cpp, ...):
// uniform random f32 tensors keyed by (seed, stream), the float64 reference's values and
// magnitudes as a RefOutput, and the reference's name for an activation.
#pragma once

#include <cstdint>
#include <utility>

#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "kernels/linear.h"
#include "test/ops/op_case.h"
#include "test/reference/linear.h"

namespace shardrec::test {

// Elements ~ U(lo, hi) from the counter-based stream (seed, stream).
inline Tensor random_f32(
    const Shape& shape, uint64_t seed, uint64_t stream, float lo = -1.f, float hi = 1.f) {
    rng::Rng r(seed, stream);
    Tensor t = Tensor::empty(shape, DType::kF32);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
        p[i] = r.uniform(lo, hi);
    }
    return t;
}

inline RefOutput ref_output(const char* name, ref::DenseValues v) {
    return RefOutput{name, std::move(v.value), std::move(v.mag)};
}

inline ref::Act to_ref(kernels::Activation act) {
    switch (act) {
        case kernels::Activation::kRelu:
            return ref::Act::kRelu;
        case kernels::Activation::kSigmoid:
            return ref::Act::kSigmoid;
        case kernels::Activation::kIdentity:
            break;
    }
    return ref::Act::kIdentity;
}

}  // namespace shardrec::test
