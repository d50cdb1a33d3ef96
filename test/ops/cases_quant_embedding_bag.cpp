// Backend-ops cases of the quantized embedding tables (kernels/quant_embedding_bag.h): quantize
// and dequantize on the CPU only (cpu_only: the CUDA harness skips them), the lookup on both.
//   kQuantizeRows: quantize then dequantize, against the float64 input within the format's bound
//     per element (the mag of each element is its bound, checked with relative(1)): int8 / int4 /
//     int2 scale / 2 + 2^-11 (|min| + |max|) of its row (the fp16 rounding of bias and scale,
//     see the header), fp16 2^-11 |x| (+ 2^-25), f32 exact, fp8 as derived in reference().
//     Rows of random values in [-2^e, 2^e] (e from -6 to 3 per row), row 0 constant, row 1 with
//     one outlier, row 2 zeros, row 3 +-2^-k for k = d % 24 (fp8: codes down to the subnormals),
//     for fp8 row 4 of values ~1e-38 (scale below f32's normal range: stored as 1); odd dims.
//   kDequantizeRows: random codes under random finite fp16 scales and biases (raw random bytes
//     for fp16 and f32, NaN and Inf included; random fp8 codes, NaN included, under finite f32
//     scales) against their float64 value decoded from the bytes alone
//     (test/reference/quant_embedding_bag.h): exact for f32 and fp16, one f32 rounding of
//     code * scale + bias for the integer types and of e4m3(code) * scale for fp8.
//   kQuantEmbeddingBagForward: one call over tables of mixed types and dims (fp8 among them), a
//     table shared by two features, L = 0..5, ids at 0 and E-1, weighted or not, SUM and MEAN,
//     against the float64 pooling of the decoded rows; f32 accumulation bound over L + 2 terms (the
//     decode's rounding, the weight's product, the sum).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>

#include "engine/core/dtype.h"
#include "engine/core/rng.h"
#include "kernels/quant_embedding_bag.h"
#include "test/ops/op_case.h"
#include "test/reference/quant_embedding_bag.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;
using kernels::QuantType;

constexpr QuantType kTypes[] = {QuantType::kF32,  QuantType::kF16,  QuantType::kInt8,
                                QuantType::kInt4, QuantType::kInt2, QuantType::kFp8};

class QuantRoundTripCase : public OpCase {
public:
    QuantRoundTripCase(QuantType type, int64_t rows, int64_t dim)
        : type_(type), rows_(rows), dim_(dim) {}

    OpKind kind() const override { return OpKind::kQuantizeRows; }

    bool cpu_only() const override { return true; }

    std::string vars() const override {
        return fmt::format("type={},rows={},D={}", kernels::quant_type_name(type_), rows_, dim_);
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 3);
        std::vector<float> x(static_cast<size_t>(rows_ * dim_));
        for (int64_t row = 0; row < rows_; ++row) {
            const float range = std::ldexp(1.0f, static_cast<int>(r.randint(-6, 4)));
            const float shift = r.uniform(-range, range);
            for (int64_t d = 0; d < dim_; ++d) {
                float& v = x[static_cast<size_t>(row * dim_ + d)];
                v = row == 0 ? shift : shift + r.uniform(-range, range);
                if (row == 1 && d == dim_ / 2)
                    v = shift + 8 * range;
                if (row == 2)
                    v = 0.0f;
                if (row == 3)
                    v = std::ldexp(d % 2 ? -1.0f : 1.0f, -static_cast<int>(d % 24));
                if (row == 4 && type_ == QuantType::kFp8)  // int types' bound does not hold here
                    v = r.uniform(-1e-38f, 1e-38f);
            }
        }
        x_ = Tensor::from_vector(x, {rows_, dim_});
    }

    std::vector<RefOutput> reference() const override {
        const std::vector<double> x = to_double(x_);
        const int bits = kernels::quant_type_bits(type_);
        std::vector<double> bound(x.size());
        for (int64_t row = 0; row < rows_; ++row) {
            double lo = INFINITY, hi = -INFINITY;
            for (int64_t d = 0; d < dim_; ++d) {
                lo = std::fmin(lo, x[static_cast<size_t>(row * dim_ + d)]);
                hi = std::fmax(hi, x[static_cast<size_t>(row * dim_ + d)]);
            }
            const double scale = (hi - lo) / ((1 << (bits % 16)) - 1);
            // fp8: s = amax / 448 (1 below f32's normal range), v = x / s in [-448, 448]. A
            // normal v (|v| >= 2^-6) keeps 3 mantissa bits: half an ulp is <= 2^-4 |v|; a
            // subnormal one lies on the grid of 2^-9: half a step is 2^-10, 2^-10 s in x. The
            // f32 divide, multiply and the rounding of s add under 2^-22 |x| (a rounded-up
            // amax / s saturates at 448, 2^-23 off).
            double fp8_scale = std::fmax(std::fabs(lo), std::fabs(hi)) / 448;
            if (fp8_scale < 0x1p-126)
                fp8_scale = 1;
            for (int64_t d = 0; d < dim_; ++d) {
                const auto i = static_cast<size_t>(row * dim_ + d);
                if (type_ == QuantType::kFp8)
                    bound[i] =
                        (0x1p-4 + 0x1p-22) * std::fabs(x[i]) + 0x1p-10 * fp8_scale * (1 + 0x1p-23);
                else if (bits == 32)
                    bound[i] = 0;
                else if (bits == 16)
                    bound[i] = 0x1p-11 * std::fabs(x[i]) + 0x1p-25;
                else  // scale / 2 of the stored (fp16-rounded) scale, and the bias's rounding
                    bound[i] =
                        scale / 2 * (1 + 0x1p-10) + 0x1p-11 * (std::fabs(lo) + std::fabs(hi));
            }
        }
        return {RefOutput{"dequantized", x, bound}};
    }

    Tolerance tolerance(size_t /*output*/) const override {
        if (type_ == QuantType::kF32) {
            Tolerance t;
            t.exact = true;
            return t;
        }
        return Tolerance::relative(1.0, 1e-30);
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor codes = make_output({rows_ * kernels::quant_row_bytes(type_, dim_)}, DType::kU8);
        Tensor decoded = make_output({rows_, dim_});
        kernels::quantize_rows(in(x_), type_, codes, stream());
        kernels::dequantize_rows(codes, type_, decoded, stream());
        return {decoded};
    }

private:
    QuantType type_;
    int64_t rows_, dim_;
    Tensor x_;
};

// Random stored rows of `type`: finite fp16 scale and bias for the integer types.
ref::QuantTable random_table(rng::Rng& r, QuantType type, int64_t rows, int64_t dim) {
    ref::QuantTable t;
    t.bits = kernels::quant_type_bits(type);
    t.fp8 = type == QuantType::kFp8;
    t.dim = dim;
    t.rows = rows;
    const int64_t row_bytes = kernels::quant_row_bytes(type, dim);
    t.bytes.resize(static_cast<size_t>(rows * row_bytes));
    for (uint8_t& b : t.bytes)
        b = static_cast<uint8_t>(r.next_u64());
    if (t.fp8) {  // values up to 448 * 0.005 = 2.24
        for (int64_t row = 0; row < rows; ++row) {
            const float scale = r.uniform(0.0f, 0.005f);
            std::memcpy(&t.bytes[static_cast<size_t>(row * row_bytes)], &scale, 4);
        }
    } else if (t.bits <= 8) {
        for (int64_t row = 0; row < rows; ++row) {
            const uint16_t scale = float_to_half(r.uniform(0.0f, 0.05f)).bits;
            const uint16_t bias = float_to_half(r.uniform(-1.0f, 1.0f)).bits;
            std::memcpy(&t.bytes[static_cast<size_t>(row * row_bytes)], &scale, 2);
            std::memcpy(&t.bytes[static_cast<size_t>(row * row_bytes + 2)], &bias, 2);
        }
    }
    return t;
}

class DequantizeCase : public OpCase {
public:
    DequantizeCase(QuantType type, int64_t rows, int64_t dim)
        : type_(type), rows_(rows), dim_(dim) {}

    OpKind kind() const override { return OpKind::kDequantizeRows; }

    bool cpu_only() const override { return true; }

    std::string vars() const override {
        return fmt::format("type={},rows={},D={}", kernels::quant_type_name(type_), rows_, dim_);
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 4);
        table_ = random_table(r, type_, rows_, dim_);
        codes_ = Tensor::from_vector(table_.bytes);
    }

    std::vector<RefOutput> reference() const override {
        std::vector<double> value(static_cast<size_t>(rows_ * dim_)), mag(value.size());
        for (int64_t row = 0; row < rows_; ++row) {
            for (int64_t d = 0; d < dim_; ++d) {
                const auto i = static_cast<size_t>(row * dim_ + d);
                value[i] = ref::quant_value(table_, row, d, &mag[i]);
            }
        }
        return {RefOutput{"dequantized", std::move(value), std::move(mag)}};
    }

    Tolerance tolerance(size_t /*output*/) const override {
        if (kernels::quant_type_bits(type_) <= 8)
            return Tolerance::relative(0x1p-24);
        Tolerance t;
        t.exact = true;
        return t;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor decoded = make_output({rows_, dim_});
        kernels::dequantize_rows(in(codes_), type_, decoded, stream());
        return {decoded};
    }

private:
    QuantType type_;
    int64_t rows_, dim_;
    ref::QuantTable table_;
    Tensor codes_;
};

struct TableSpec {
    QuantType type;
    int64_t rows, dim;
};

class QuantEmbeddingBagCase : public OpCase {
public:
    QuantEmbeddingBagCase(std::vector<TableSpec> tables,
                          std::vector<int32_t> feature_table,
                          int64_t batch,
                          bool weighted,
                          PoolingMode mode)
        : specs_(std::move(tables)),
          feature_table_(std::move(feature_table)),
          batch_(batch),
          weighted_(weighted),
          mode_(mode) {}

    OpKind kind() const override { return OpKind::kQuantEmbeddingBagForward; }

    std::string vars() const override {
        std::string tables;
        for (const TableSpec& t : specs_)
            tables += fmt::format("{}{}x{}:{}", tables.empty() ? "" : "/", t.rows, t.dim,
                                  kernels::quant_type_name(t.type));
        return fmt::format("tables={},F={},B={},weighted={},mode={}", tables, feature_table_.size(),
                           batch_, weighted_, pooling_mode_name(mode_));
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 5);
        tables_.clear();
        std::vector<uint8_t> bytes;
        std::vector<int64_t> weights_offsets{0};
        std::vector<uint8_t> tys;
        std::vector<int32_t> D_offsets{0};
        for (const TableSpec& s : specs_) {
            tables_.push_back(random_table(r, s.type, s.rows, s.dim));
            bytes.insert(bytes.end(), tables_.back().bytes.begin(), tables_.back().bytes.end());
            weights_offsets.push_back(static_cast<int64_t>(bytes.size()));
            tys.push_back(static_cast<uint8_t>(s.type));
            D_offsets.push_back(D_offsets.back() + static_cast<int32_t>(s.dim));
        }
        // Raw random f32 / fp16 bytes may be NaN or huge: those tables get values in [-1, 1];
        // fp8's NaN codes (0x7f, 0xff) become 448 (0x7e, 0xfe).
        for (size_t t = 0; t < specs_.size(); ++t) {
            if (tables_[t].fp8) {
                const int64_t row_bytes = ref::quant_row_bytes(8, specs_[t].dim);
                for (int64_t row = 0; row < specs_[t].rows; ++row) {
                    for (int64_t d = 0; d < specs_[t].dim; ++d) {
                        uint8_t& c = tables_[t].bytes[static_cast<size_t>(row * row_bytes + 4 + d)];
                        if ((c & 0x7f) == 0x7f)
                            c = static_cast<uint8_t>(c - 1);
                    }
                }
                std::memcpy(&bytes[static_cast<size_t>(weights_offsets[t])],
                            tables_[t].bytes.data(), tables_[t].bytes.size());
            }
            if (tables_[t].bits >= 16) {
                const int64_t row_bytes = ref::quant_row_bytes(tables_[t].bits, specs_[t].dim);
                for (int64_t row = 0; row < specs_[t].rows; ++row) {
                    for (int64_t d = 0; d < specs_[t].dim; ++d) {
                        const float v = r.uniform(-1.0f, 1.0f);
                        uint8_t* p = &tables_[t].bytes[static_cast<size_t>(row * row_bytes)];
                        if (tables_[t].bits == 32) {
                            std::memcpy(p + 4 * d, &v, 4);
                        } else {
                            const uint16_t h = float_to_half(v).bits;
                            std::memcpy(p + 2 * d, &h, 2);
                        }
                    }
                }
                std::memcpy(&bytes[static_cast<size_t>(weights_offsets[t])],
                            tables_[t].bytes.data(), tables_[t].bytes.size());
            }
        }
        lookup_ = ref::EmbeddingLookup{};
        lookup_.feature_table = feature_table_;
        lookup_.offsets.push_back(0);
        std::vector<float> w;
        for (size_t f = 0; f < feature_table_.size(); ++f) {
            const int64_t rows = specs_[static_cast<size_t>(feature_table_[f])].rows;
            for (int64_t b = 0; b < batch_; ++b) {
                const int64_t length = b == 0 ? 0 : r.randint(0, 6);
                for (int64_t i = 0; i < length; ++i) {
                    const int64_t id = i == 0 && b == 1   ? 0
                                       : i == 0 && b == 2 ? rows - 1
                                                          : r.randint(0, rows);
                    lookup_.ids.push_back(id);
                    w.push_back(r.uniform(-2.0f, 2.0f));
                }
                lookup_.offsets.push_back(static_cast<int64_t>(lookup_.ids.size()));
            }
        }
        if (weighted_)
            lookup_.per_sample_weights.assign(w.begin(), w.end());
        weights_ = Tensor::from_vector(bytes);
        weights_offsets_ = Tensor::from_vector(weights_offsets);
        tys_ = Tensor::from_vector(tys);
        D_offsets_ = Tensor::from_vector(D_offsets);
        feature_table_t_ = Tensor::from_vector(feature_table_);
        ids_ = Tensor::from_vector(lookup_.ids);
        offsets_ = Tensor::from_vector(lookup_.offsets);
        psw_ = Tensor::from_vector(w);
    }

    std::vector<RefOutput> reference() const override {
        ref::Values v = ref::quant_embedding_bag_forward(tables_, lookup_, mode_);
        return {RefOutput{"out", std::move(v.value), std::move(v.mag)}};
    }

    int64_t terms(size_t /*output*/) const override { return 5 + 2; }

    Tolerance tolerance(size_t output) const override {
        Tolerance t;
        t.terms = terms(output);
        return t;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        int64_t cols = 0;
        for (int32_t t : feature_table_)
            cols += specs_[static_cast<size_t>(t)].dim;
        Tensor out = make_output({batch_, cols});
        kernels::quant_embedding_bag_forward(
            in(weights_), in(weights_offsets_), in(tys_), in(D_offsets_), in(feature_table_t_),
            in(ids_), in(offsets_), weighted_ ? &in(psw_) : nullptr, mode_, out, stream());
        return {out};
    }

private:
    std::vector<TableSpec> specs_;
    std::vector<int32_t> feature_table_;
    int64_t batch_;
    bool weighted_;
    PoolingMode mode_;
    std::vector<ref::QuantTable> tables_;
    ref::EmbeddingLookup lookup_;
    Tensor weights_, weights_offsets_, tys_, D_offsets_, feature_table_t_, ids_, offsets_, psw_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (QuantType t : kTypes) {
        cases.push_back(std::make_unique<QuantRoundTripCase>(t, 64, 64));
        cases.push_back(std::make_unique<QuantRoundTripCase>(t, 33, 7));
        cases.push_back(std::make_unique<QuantRoundTripCase>(t, 8, 30));  // fp8 rows of 48 bytes
        cases.push_back(std::make_unique<QuantRoundTripCase>(t, 5, 1));
        cases.push_back(std::make_unique<QuantRoundTripCase>(t, 0, 16));
        cases.push_back(std::make_unique<DequantizeCase>(t, 40, 13));
        cases.push_back(std::make_unique<DequantizeCase>(t, 3, 64));
    }
    const std::vector<TableSpec> mixed = {{QuantType::kInt8, 50, 16}, {QuantType::kInt4, 30, 8},
                                          {QuantType::kInt2, 20, 12}, {QuantType::kF16, 10, 4},
                                          {QuantType::kF32, 7, 5},    {QuantType::kInt4, 9, 3},
                                          {QuantType::kFp8, 25, 10},  {QuantType::kFp8, 6, 17}};
    const std::vector<int32_t> features = {0, 1, 2, 3, 4, 5, 1, 6, 7, 6};  // tables 1, 6 shared
    for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
        for (bool weighted : {false, true})
            cases.push_back(
                std::make_unique<QuantEmbeddingBagCase>(mixed, features, 9, weighted, mode));
    }
    // int4 and int2 rows wider than a warp's 32 lanes (CUDA: a lane's second pass over the packed
    // bytes, its nibble or crumb in a later byte).
    cases.push_back(std::make_unique<QuantEmbeddingBagCase>(
        std::vector<TableSpec>{{QuantType::kInt4, 30, 40}, {QuantType::kInt2, 20, 70}},
        std::vector<int32_t>{0, 1, 0}, 9, true, PoolingMode::kSum));
    for (QuantType t : {QuantType::kInt8, QuantType::kFp8})
        cases.push_back(std::make_unique<QuantEmbeddingBagCase>(
            std::vector<TableSpec>{{t, 1000, 64}}, std::vector<int32_t>{0}, 64, false,
            PoolingMode::kSum));
    return cases;
});

}  // namespace
}  // namespace shardrec::test
