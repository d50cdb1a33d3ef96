// Backend-ops cases of the quantized communication codecs (kernels/qcomm_codec.h).
//   kQCommEncode: encode then decode (the round trip a collective makes), against the float64
//     input within the format's bound: fp16 2^-11 |x| (+ 2^-25, half the subnormal spacing),
//     bf16 2^-8 |x|, fp8 2^-4 of the row's finite amax. Values span 2^-12..2^12 (inside fp16's
//     normal range) with both signs; with specials, row 0 is all zeros, row 1 holds its amax in
//     several columns (the fp8 code 448 exactly), row 2 has NaN, +Inf and -Inf (NaN stays NaN;
//     fp16/bf16 keep +-Inf, fp8 has no infinity and decodes them as NaN) among finite values.
//   kQCommDecode: decoding random codes (every bit pattern, NaN and Inf codes included) against
//     the float64 value of their bit fields (test/reference/qcomm_codec.h): exact for fp16 and
//     bf16, one f32 rounding of code * scale for fp8.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "engine/core/rng.h"
#include "kernels/qcomm_codec.h"
#include "test/ops/op_case.h"
#include "test/reference/qcomm_codec.h"

namespace shardrec::test {
namespace {

using kernels::CommType;
using kernels::OpKind;

class QCommRoundTripCase : public OpCase {
public:
    QCommRoundTripCase(CommType type, int64_t rows, int64_t cols, bool specials)
        : type_(type), rows_(rows), cols_(cols), specials_(specials) {}

    OpKind kind() const override { return OpKind::kQCommEncode; }

    std::string vars() const override {
        return fmt::format("type={},rows={},cols={},specials={}", kernels::comm_type_name(type_),
                           rows_, cols_, specials_);
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 1);
        std::vector<float> x(static_cast<size_t>(rows_ * cols_));
        for (float& v : x) {
            v = std::ldexp(r.uniform(1.0f, 2.0f), static_cast<int>(r.uniform(-12.0f, 12.0f)));
            if (r.uniform() < 0.5)
                v = -v;
        }
        auto at = [&](int64_t row, int64_t col) -> float& {
            return x[static_cast<size_t>(row * cols_ + col)];
        };
        if (specials_ && rows_ >= 3 && cols_ >= 3) {
            for (int64_t j = 0; j < cols_; ++j)
                at(0, j) = 0.0f;
            at(1, 0) = 4096.0f;
            at(1, cols_ - 1) = -4096.0f;
            at(1, cols_ / 2) = 4096.0f;
            at(2, 0) = std::numeric_limits<float>::quiet_NaN();
            at(2, 1) = std::numeric_limits<float>::infinity();
            at(2, 2) = -std::numeric_limits<float>::infinity();
        }
        x_ = Tensor::from_vector(x, {rows_, cols_});
    }

    std::vector<RefOutput> reference() const override {
        const std::vector<double> x = to_double(x_);
        std::vector<double> value = x, mag(x.size());
        for (int64_t r = 0; r < rows_; ++r) {
            double amax = 0;
            for (int64_t j = 0; j < cols_; ++j) {
                const double v = x[static_cast<size_t>(r * cols_ + j)];
                if (std::isfinite(v))
                    amax = std::max(amax, std::fabs(v));
            }
            for (int64_t j = 0; j < cols_; ++j) {
                const auto i = static_cast<size_t>(r * cols_ + j);
                mag[i] = type_ == CommType::kFp8 ? amax : std::fabs(x[i]);
                if (type_ == CommType::kFp8 && std::isinf(x[i]))
                    value[i] = std::numeric_limits<double>::quiet_NaN();
            }
        }
        return {RefOutput{"decoded", std::move(value), std::move(mag)}};
    }

    Tolerance tolerance(size_t /*output*/) const override {
        switch (type_) {
            case CommType::kFp32:
                return Tolerance::relative(0.0);
            case CommType::kFp16:
                return Tolerance::relative(0x1p-11, 0x1p-25);
            case CommType::kBf16:
                return Tolerance::relative(0x1p-8);
            case CommType::kFp8:
                break;
        }
        return Tolerance::relative(0x1p-4);
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor encoded = make_output({rows_ * kernels::qcomm_row_bytes(type_, cols_)}, DType::kU8);
        Tensor decoded = make_output({rows_, cols_});
        kernels::qcomm_encode(in(x_), type_, encoded, stream());
        kernels::qcomm_decode(encoded, type_, decoded, stream());
        return {decoded};
    }

    double bytes() const override {  // read f32, write and read the codes, write f32
        return static_cast<double>(rows_) *
               (8.0 * cols_ + 2.0 * kernels::qcomm_row_bytes(type_, cols_));
    }

private:
    CommType type_;
    int64_t rows_, cols_;
    bool specials_;
    Tensor x_;
};

class QCommDecodeCase : public OpCase {
public:
    QCommDecodeCase(CommType type, int64_t rows, int64_t cols)
        : type_(type), rows_(rows), cols_(cols) {}

    OpKind kind() const override { return OpKind::kQCommDecode; }

    std::string vars() const override {
        return fmt::format("type={},rows={},cols={}", kernels::comm_type_name(type_), rows_, cols_);
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 2);
        const int64_t row_bytes = kernels::qcomm_row_bytes(type_, cols_);
        std::vector<uint8_t> bytes(static_cast<size_t>(rows_ * row_bytes));
        for (uint8_t& b : bytes)
            b = static_cast<uint8_t>(r.next_u64());
        scales_.assign(static_cast<size_t>(rows_), 0.0f);
        if (type_ == CommType::kFp8) {  // positive finite scales, as the encoder writes them
            for (int64_t row = 0; row < rows_; ++row) {
                const float s =
                    std::ldexp(r.uniform(1.0f, 2.0f), static_cast<int>(r.uniform(-20.0f, 20.0f)));
                scales_[static_cast<size_t>(row)] = s;
                std::memcpy(&bytes[static_cast<size_t>(row * row_bytes + cols_)], &s, 4);
            }
        }
        codes_ = Tensor::from_vector(bytes);
    }

    std::vector<RefOutput> reference() const override {
        const uint8_t* c = codes_.data<uint8_t>();
        const int64_t row_bytes = kernels::qcomm_row_bytes(type_, cols_);
        std::vector<double> value(static_cast<size_t>(rows_ * cols_));
        for (int64_t r = 0; r < rows_; ++r) {
            for (int64_t j = 0; j < cols_; ++j) {
                const uint8_t* p = c + r * row_bytes;
                double v = 0;
                if (type_ == CommType::kFp8) {
                    v = ref::fp8_e4m3_value(p[j]) * scales_[static_cast<size_t>(r)];
                } else {
                    const auto bits = static_cast<uint16_t>(p[2 * j] | (p[2 * j + 1] << 8));
                    v = type_ == CommType::kFp16 ? ref::fp16_value(bits) : ref::bf16_value(bits);
                }
                value[static_cast<size_t>(r * cols_ + j)] = v;
            }
        }
        std::vector<double> mag(value.size());
        for (size_t i = 0; i < value.size(); ++i)
            mag[i] = std::fabs(value[i]);
        return {RefOutput{"decoded", std::move(value), std::move(mag)}};
    }

    Tolerance tolerance(size_t /*output*/) const override {
        if (type_ == CommType::kFp8)  // code * scale, one f32 rounding
            return Tolerance::relative(0x1p-24);
        Tolerance t;
        t.exact = true;
        return t;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor decoded = make_output({rows_, cols_});
        kernels::qcomm_decode(in(codes_), type_, decoded, stream());
        return {decoded};
    }

private:
    CommType type_;
    int64_t rows_, cols_;
    Tensor codes_;
    std::vector<float> scales_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (CommType t : {CommType::kFp32, CommType::kFp16, CommType::kBf16, CommType::kFp8}) {
        cases.push_back(std::make_unique<QCommRoundTripCase>(t, 64, 33, true));
        cases.push_back(std::make_unique<QCommRoundTripCase>(t, 1, 1, false));
        cases.push_back(std::make_unique<QCommRoundTripCase>(t, 0, 16, false));
        cases.push_back(std::make_unique<QCommRoundTripCase>(t, 300, 128, true));
    }
    for (CommType t : {CommType::kFp16, CommType::kBf16, CommType::kFp8}) {
        cases.push_back(std::make_unique<QCommDecodeCase>(t, 40, 37));
        cases.push_back(std::make_unique<QCommDecodeCase>(t, 1, 1));
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
