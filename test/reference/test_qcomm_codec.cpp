// The quantized comm codecs' edge cases, by hand (kernels/qcomm_codec.h): round to nearest even
// at the ties of each format, the largest values and overflow, rows of zeros, NaN and Inf, the
// byte layout of an fp8 row; the reference's values of the codes it judges the decoders by; and
// the AVX-512 fp16 and bf16 conversions against the scalar ones, bit for bit.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/embedding_bag_update.h"  // vector_loads, force_scalar_loads
#include "kernels/qcomm_codec.h"
#include "test/reference/qcomm_codec.h"
#include "test/support/compare.h"

using namespace shardrec;
using kernels::CommType;

namespace {

// One row through encode and decode on the CPU; `encoded` gets the row's bytes.
std::vector<float> round_trip(const std::vector<float>& x,
                              CommType type,
                              std::vector<uint8_t>* encoded = nullptr) {
    const auto cols = static_cast<int64_t>(x.size());
    Tensor in = Tensor::from_vector(x, {1, cols});
    Tensor bytes = Tensor::zeros({kernels::qcomm_row_bytes(type, cols)}, DType::kU8);
    Tensor out = Tensor::zeros({1, cols}, DType::kF32);
    kernels::qcomm_encode(in, type, bytes, Stream::cpu());
    kernels::qcomm_decode(bytes, type, out, Stream::cpu());
    if (encoded != nullptr)
        *encoded = bytes.to_vector<uint8_t>();
    return out.to_vector<float>();
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("reference qcomm codec: values of the codes", "[reference]") {
    CHECK(ref::fp8_e4m3_value(0x7e) == 448.0);
    CHECK(ref::fp8_e4m3_value(0xfe) == -448.0);
    CHECK(std::isnan(ref::fp8_e4m3_value(0x7f)));
    CHECK(std::isnan(ref::fp8_e4m3_value(0xff)));
    CHECK(ref::fp8_e4m3_value(0x78) == 256.0);  // exponent 15 is a normal binade in E4M3FN
    CHECK(ref::fp8_e4m3_value(0x01) == std::ldexp(1.0, -9));
    CHECK(ref::fp8_e4m3_value(0x08) == std::ldexp(1.0, -6));
    CHECK(ref::fp8_e4m3_value(0x38) == 1.0);
    CHECK(ref::fp16_value(0x7bff) == 65504.0);
    CHECK(std::isinf(ref::fp16_value(0x7c00)));
    CHECK(ref::fp16_value(0x0001) == std::ldexp(1.0, -24));
    CHECK(ref::bf16_value(0x3f80) == 1.0);
    CHECK(ref::bf16_value(0xc000) == -2.0);
}

TEST_CASE("qcomm codec: fp16 and bf16 round to nearest even and keep NaN and Inf", "[reference]") {
    // Ties between 1 and the next value go to the even one (1); 1 + 3 half-ulps rounds up.
    const std::vector<float> half_ties = {
        1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, kNan, -kInf, 0.0f};
    const std::vector<float> h = round_trip(half_ties, CommType::kFp16);
    CHECK(h[0] == 1.0f);
    CHECK(h[1] == 1.0f + 0x1p-9f);
    CHECK(h[2] == 65504.0f);
    CHECK(h[3] == 65504.0f);
    CHECK(h[4] == kInf);  // beyond the largest half's rounding range: Inf, as torch's .half()
    CHECK(std::isnan(h[5]));
    CHECK(h[6] == -kInf);
    CHECK(h[7] == 0.0f);
    const std::vector<float> b =
        round_trip({1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, kNan, kInf, -0.0f}, CommType::kBf16);
    CHECK(b[0] == 1.0f);
    CHECK(b[1] == 1.0f + 0x1p-6f);
    CHECK(std::isnan(b[2]));
    CHECK(b[3] == kInf);
    CHECK(b[4] == 0.0f);
}

TEST_CASE("qcomm codec: fp8 scales each row by amax / 448 and rounds to nearest even",
          "[reference]") {
    std::vector<uint8_t> bytes;
    // amax 448 gives scale 1: the values are their own codes.
    const std::vector<float> x = {
        448.0f, -448.0f, 1.0f + 1.0f / 16, 1.0f + 3.0f / 16, 0x1p-10f, 3 * 0x1p-10f, 0.0f};
    const std::vector<float> y = round_trip(x, CommType::kFp8, &bytes);
    REQUIRE(bytes.size() == x.size() + 4);
    CHECK(bytes[0] == 0x7e);
    CHECK(bytes[1] == 0xfe);
    float scale;
    std::memcpy(&scale, &bytes[x.size()], 4);
    CHECK(scale == 1.0f);
    CHECK(y[0] == 448.0f);
    CHECK(y[1] == -448.0f);
    CHECK(y[2] == 1.0f);     // tie: to the even 1.0
    CHECK(y[3] == 1.25f);    // tie: to the even 1.25
    CHECK(y[4] == 0.0f);     // subnormal tie at half of 2^-9: to 0
    CHECK(y[5] == 0x1p-8f);  // 1.5 * 2^-9: to 2 * 2^-9
    CHECK(y[6] == 0.0f);

    // The row's amax comes back within one f32 rounding of the scale; zeros stay zeros.
    const std::vector<float> z = round_trip({0.0f, 0.0f, 0.0f}, CommType::kFp8, &bytes);
    CHECK(z == std::vector<float>{0.0f, 0.0f, 0.0f});
    std::memcpy(&scale, &bytes[3], 4);
    CHECK(scale == 0.0f);
    const std::vector<float> m = round_trip({-3.0f, 1.0f}, CommType::kFp8);
    CHECK(std::fabs(m[0] + 3.0f) <= 3.0f * 0x1p-23f);
    CHECK(std::fabs(m[1] - 1.0f) <= 3.0f * 0x1p-4f);
}

TEST_CASE("qcomm codec: fp8 turns NaN and Inf into NaN and scales by the finite values",
          "[reference]") {
    const std::vector<float> y = round_trip({kNan, kInf, -kInf, 2.0f, -1.0f}, CommType::kFp8);
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(y[1]));
    CHECK(std::isnan(y[2]));
    CHECK(y[3] == 2.0f);  // amax 2: scale 2 / 448, 2 encodes as 448 and decodes to 2 (+- 1 ulp)
    CHECK(std::fabs(y[4] + 1.0f) <= 0x1p-4f * 2.0f);
}

TEST_CASE("qcomm codec: a buffer too small for the rows is refused", "[reference]") {
    Tensor in = Tensor::zeros({4, 8}, DType::kF32);
    Tensor bytes = Tensor::zeros({4 * 8 + 15}, DType::kU8);
    CHECK_THROWS_WITH(kernels::qcomm_encode(in, CommType::kFp8, bytes, Stream::cpu()),
                      Catch::Contains("47 bytes hold fewer than 4 rows of 8 fp8 values"));
    CHECK_THROWS_WITH(kernels::comm_type_from_name("int8"),
                      Catch::Contains("unknown comm precision 'int8'"));
}

TEST_CASE("qcomm codec: the vector fp16, bf16 and fp8 conversions give the scalar path's bits",
          "[reference]") {
    // AVX-512: every conversion; AVX2: the 16-bit decodes (the encodes are scalar there).
    if (!kernels::cpu::detail::vector_loads()) {
        test::not_run("this CPU has neither AVX-512 nor AVX2 with F16C");
        return;
    }
    // Every class of f32 bits: random patterns (NaNs with payloads, infinities, subnormals,
    // overflow), values near fp16's and bf16's rounding ties, and a length that leaves a tail.
    const int64_t n = 3 * 4096 + 37;
    std::vector<float> x(static_cast<size_t>(n));
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        auto u = static_cast<uint32_t>(state >> 32);
        if (i % 3 == 1)  // a tie of fp16 (13 low bits 0x1000) or bf16 (16 low bits 0x8000)
            u = (u & ~0x1fffu) | 0x1000u;
        if (i % 3 == 2)
            u = (u & ~0xffffu) | 0x8000u;
        std::memcpy(&x[static_cast<size_t>(i)], &u, 4);
    }
    // fp8 in rows of 145 (each scaled by its amax), a tail of one after 9 groups of 16.
    x[5] = 0.0f;
    for (const CommType type : {CommType::kFp16, CommType::kBf16, CommType::kFp8}) {
        INFO(kernels::comm_type_name(type));
        const int64_t cols = 145, rows = n / cols;
        REQUIRE(rows * cols == n);
        Tensor in = Tensor::from_vector(x, {rows, cols});
        const int64_t bytes = rows * kernels::qcomm_row_bytes(type, cols);
        Tensor vec = Tensor::zeros({bytes}, DType::kU8), scalar = vec.clone();
        Tensor back_vec = Tensor::zeros({rows, cols}, DType::kF32), back_scalar = back_vec.clone();
        kernels::qcomm_encode(in, type, vec, Stream::cpu());
        kernels::qcomm_decode(vec, type, back_vec, Stream::cpu());
        kernels::cpu::detail::force_scalar_loads(true);
        kernels::qcomm_encode(in, type, scalar, Stream::cpu());
        kernels::qcomm_decode(vec, type, back_scalar, Stream::cpu());
        kernels::cpu::detail::force_scalar_loads(false);
        CHECK(std::memcmp(vec.data_ptr(), scalar.data_ptr(), static_cast<size_t>(bytes)) == 0);
        CHECK(std::memcmp(back_vec.data_ptr(), back_scalar.data_ptr(),
                          static_cast<size_t>(4 * n)) == 0);
        if (type == CommType::kFp8)
            continue;
        // Every 16-bit pattern decodes alike too (signalling NaNs included).
        std::vector<uint8_t> all(2 * 65536);
        for (uint32_t v = 0; v < 65536; ++v) {
            all[2 * v] = static_cast<uint8_t>(v);
            all[2 * v + 1] = static_cast<uint8_t>(v >> 8);
        }
        Tensor codes = Tensor::from_vector(all), a = Tensor::zeros({1, 65536}, DType::kF32),
               b = a.clone();
        kernels::qcomm_decode(codes, type, a, Stream::cpu());
        kernels::cpu::detail::force_scalar_loads(true);
        kernels::qcomm_decode(codes, type, b, Stream::cpu());
        kernels::cpu::detail::force_scalar_loads(false);
        CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), 4 * 65536) == 0);
    }
}

TEST_CASE("qcomm codec: fp8 rows encode each value as float_to_fp8_e4m3 does", "[reference]") {
    // Rows whose amax is 448 (scale 1, so the codes are float_to_fp8_e4m3 of the values
    // themselves): random values of every magnitude below it, E4M3's rounding ties (normal: 20
    // dropped bits 0x80000; subnormal: odd multiples of 2^-10), NaN and infinities.
    const int64_t rows = 64, cols = 1000;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    uint64_t state = 12345;
    for (int64_t i = 0; i < rows * cols; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const auto r = static_cast<uint32_t>(state >> 33);
        float v;
        if (i % cols == 0) {
            v = 448.0f;
        } else if (i % 5 == 1) {
            const uint32_t bits = ((r % 30u + 100u) << 23) | ((r & 7u) << 20) | 0x80000u;
            std::memcpy(&v, &bits, 4);  // a normal tie, 2^-27 .. 2^2
        } else if (i % 5 == 2) {
            v = static_cast<float>(2 * (r % 8) + 1) * 0x1p-10f;  // a subnormal tie
        } else if (i % 97 == 3) {
            v = i % 2 ? kNan : -kInf;
        } else {
            const uint32_t bits = (r % 0x43e00000u);  // below 448
            std::memcpy(&v, &bits, 4);
        }
        x[static_cast<size_t>(i)] = (r & 0x40000000u) ? -v : v;
    }
    Tensor in = Tensor::from_vector(x, {rows, cols});
    const int64_t row_bytes = kernels::qcomm_row_bytes(CommType::kFp8, cols);
    Tensor bytes = Tensor::zeros({rows * row_bytes}, DType::kU8);
    kernels::qcomm_encode(in, CommType::kFp8, bytes, Stream::cpu());
    const uint8_t* b = bytes.data<uint8_t>();
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r) {
        float scale;
        std::memcpy(&scale, b + r * row_bytes + cols, 4);
        REQUIRE(scale == 1.0f);
        for (int64_t j = 0; j < cols; ++j)
            wrong += b[r * row_bytes + j] !=
                     kernels::float_to_fp8_e4m3(x[static_cast<size_t>(r * cols + j)]);
    }
    CHECK(wrong == 0);
}
