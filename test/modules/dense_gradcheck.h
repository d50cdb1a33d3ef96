// Shared checks of the dense module tests: the module's float forward and backward against a
// float64 forward composed from the reference ops (test/reference), differentiated by central
// finite differences, for the input and every parameter; and the no-allocation-after-warm-up
// rule for a repeated step.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/rng.h"
#include "engine/modules/module.h"
#include "test/reference/finite_difference.h"
#include "test/support/compare.h"

namespace shardrec::test {

inline std::vector<double> as_double(const Tensor& t) {
    const std::vector<float> v = t.to_vector<float>();
    return std::vector<double>(v.begin(), v.end());
}

inline Tensor random_input(const Shape& shape, uint64_t stream, float lo = -1.f, float hi = 1.f) {
    rng::Rng r(test_seed(), stream);
    Tensor t = Tensor::empty(shape, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) {
        t.data<float>()[i] = r.uniform(lo, hi);
    }
    return t;
}

// f(x, params) in float64, params in the order of module.parameters().
using RefForward = std::function<std::vector<double>(const std::vector<double>&,
                                                     const std::vector<std::vector<double>>&)>;

// Forward agrees with f to 1e-5 and every gradient with f's finite differences to 1e-4 (relative
// to max(1, |g|)): the module computes in f32 and the finite differences are of the f64 forward.
inline void check_module_gradients(DenseModule& module, const Tensor& x, const RefForward& f) {
    std::vector<Parameter*> params = module.parameters();
    std::vector<std::vector<double>> p64;
    for (Parameter* p : params) {
        p64.push_back(as_double(p->value));
    }
    const std::vector<double> x64 = as_double(x);
    const Tensor y = module.forward(x).clone();
    INFO("seed " << test_seed());
    CHECK_RELATIVE(as_double(y), f(x64, p64), 1e-5);
    const Tensor up = random_input(y.shape(), 99);
    const std::vector<double> up64 = as_double(up);
    const std::vector<double> grad_x = as_double(module.backward(up));
    const auto fx = [&](const std::vector<double>& v) { return f(v, p64); };
    CHECK_RELATIVE(grad_x, ref::numerical_gradient(fx, x64, up64), 1e-4);
    for (size_t i = 0; i < params.size(); ++i) {
        INFO("parameter " << params[i]->name);
        const auto fp = [&](const std::vector<double>& v) {
            std::vector<std::vector<double>> q = p64;
            q[i] = v;
            return f(x64, q);
        };
        CHECK_RELATIVE(as_double(params[i]->grad), ref::numerical_gradient(fp, p64[i], up64), 1e-4);
    }
}

// A second and third step at the same batch shape allocate no tensor (buffers are reused).
inline void check_steady_state_allocates_nothing(DenseModule& module, const Tensor& x) {
    const Tensor up = random_input({x.size(0), module.out_features()}, 98);
    module.forward(x);
    module.backward(up);
    const Tensor* first = &module.forward(x);
    const void* first_data = first->data_ptr();
    module.backward(up);
    const int64_t before = alloc_stats(DeviceType::kCpu).num_allocs;
    const Tensor& again = module.forward(x);
    module.backward(up);
    CHECK(alloc_stats(DeviceType::kCpu).num_allocs == before);
    CHECK(again.data_ptr() == first_data);
}

}  // namespace shardrec::test
