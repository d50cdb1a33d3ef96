// The quantized comm codecs' edge cases, by hand (kernels/qcomm_codec.h): round to nearest even
// at the ties of each format, the largest values and overflow, rows of zeros, NaN and Inf, the
// byte layout of an fp8 row; and the reference's values of the codes it judges the decoders by.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/qcomm_codec.h"
#include "test/reference/qcomm_codec.h"

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
