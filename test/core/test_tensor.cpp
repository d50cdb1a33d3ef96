#include <catch2/catch.hpp>

#include "engine/core/allocator.h"
#include "engine/core/tensor.h"

using namespace shardrec;

TEST_CASE("Tensor: views share storage and slices offset by rows", "[core]") {
    Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
    REQUIRE(t.shape() == Shape{3, 2});
    Tensor s = t.slice(1, 3);
    REQUIRE(s.shape() == Shape{2, 2});
    CHECK(s.data<float>()[0] == 2.0f);
    s.data<float>()[0] = 7.0f;
    CHECK(t.data<float>()[2] == 7.0f);
    Tensor v = t.view({6});
    CHECK(v.data<float>()[2] == 7.0f);
    Tensor c = t.clone();
    c.data<float>()[0] = -1.0f;
    CHECK(t.data<float>()[0] == 0.0f);
}

TEST_CASE("Tensor: wrong dtype access and bad views throw", "[core]") {
    Tensor t = Tensor::zeros({4}, DType::kI64);
    CHECK_THROWS_AS(t.data<float>(), Error);
    CHECK_THROWS_AS(t.view({3}), Error);
    CHECK_THROWS_AS(t.slice(2, 5), Error);
    CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % kCpuAlignment == 0);
}

TEST_CASE("dtype: f16 and bf16 conversions round to nearest even and keep exact values", "[core]") {
    for (float x : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
        CHECK(half_to_float(float_to_half(x)) == x);
    }
    CHECK(half_to_float(float_to_half(1.0f + 0x1.0p-11f)) == 1.0f);                  // tie -> even
    CHECK(half_to_float(float_to_half(1.0f + 3 * 0x1.0p-11f)) == 1.0f + 0x1.0p-9f);  // tie -> even
    CHECK(std::isinf(half_to_float(float_to_half(70000.0f))));
    for (float x : {0.0f, 1.0f, -3.0f, 0x1.8p100f})
        CHECK(bf16_to_float(float_to_bf16(x)) == x);
    CHECK(bf16_to_float(float_to_bf16(1.0f + 0x1.0p-8f)) == 1.0f);  // tie -> even
}

TEST_CASE("allocations are counted per device type: current, peak and number", "[core]") {
    const AllocStats host0 = alloc_stats(DeviceType::kCpu);
    const AllocStats cuda0 = alloc_stats(DeviceType::kCuda);
    {
        const Tensor a = Tensor::empty({1000}, DType::kF32);
        const Tensor b = Tensor::empty({3, 5}, DType::kI64);
        const AllocStats host = alloc_stats(DeviceType::kCpu);
        CHECK(host.num_allocs == host0.num_allocs + 2);
        CHECK(host.current_bytes == host0.current_bytes + 4000 + 120);
        CHECK(host.peak_bytes >= host.current_bytes);
        const Tensor view = a.view({10, 100});  // a view allocates nothing
        CHECK(alloc_stats(DeviceType::kCpu).num_allocs == host.num_allocs);
    }
    const AllocStats host1 = alloc_stats(DeviceType::kCpu);
    CHECK(host1.current_bytes == host0.current_bytes);
    CHECK(host1.peak_bytes >= host0.current_bytes + 4120);
    const AllocStats cuda1 = alloc_stats(DeviceType::kCuda);  // host tensors leave it alone
    CHECK(cuda1.num_allocs == cuda0.num_allocs);
    CHECK(cuda1.current_bytes == cuda0.current_bytes);
}
