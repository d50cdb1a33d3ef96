// Backend-ops cases of the cache row moves (kernels/cache_rows.h), every pair of slot and row
// dtypes (f32, f16, bf16) and every optimizer-state layout (none, one value a row as row-wise
// Adagrad, one per column as Adagrad, two per column as Adam), exact:
//   kCacheRowsPack: the payloads' bytes, from the slots' values rounded in float64 to the row
//     dtype (nearest even) and encoded from their bit fields here, the states' f32 bytes.
//   kCacheRowsUnpack: a cache whose listed slots take the payloads' rows (rounded to the slot
//     dtype), the other slots unchanged.
// Values stay in [2^-10, 2^10] in magnitude: normal numbers of every format. Cases of one dtype
// for slots and rows also carry NaNs with payloads and signs, infinities, the least subnormal and
// -0 in each row's first columns: their bytes move unchanged (the payloads are compared byte by
// byte; a conversion through f32 would make a NaN canonical).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/core/rng.h"
#include "kernels/cache_rows.h"
#include "test/ops/op_case.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

int mantissa_bits(DType t) {  // significant bits, the implicit one included
    return t == DType::kF16 ? 11 : t == DType::kBF16 ? 8 : 24;
}

double round_to(double v, DType t) {  // nearest even at t's precision (normal range)
    if (v == 0)
        return v;
    int e = 0;
    std::frexp(v, &e);
    const int shift = mantissa_bits(t) - e;
    return std::ldexp(std::nearbyint(std::ldexp(v, shift)), -shift);
}

// The bytes of v (exactly representable in t, normal) in format t, from its bit fields.
void encode(double v, DType t, uint8_t* out) {
    if (t == DType::kF32) {
        const auto f = static_cast<float>(v);
        std::memcpy(out, &f, 4);
        return;
    }
    const int exp_bits = t == DType::kF16 ? 5 : 8, man_bits = mantissa_bits(t) - 1;
    const int bias = (1 << (exp_bits - 1)) - 1;
    int e = 0;
    const double m = std::frexp(std::fabs(v), &e);  // |v| = m 2^e, m in [0.5, 1)
    const auto man = static_cast<uint32_t>(std::ldexp(m * 2 - 1, man_bits));
    const uint32_t bits = (v < 0 ? 1u << (exp_bits + man_bits) : 0u) |
                          static_cast<uint32_t>(e - 1 + bias) << man_bits | man;
    out[0] = static_cast<uint8_t>(bits);
    out[1] = static_cast<uint8_t>(bits >> 8);
}

// A random normal value of format t.
constexpr int kSpecials = 6;

// The bytes of special value k of format t (little-endian), and the value.
std::vector<uint8_t> special_bytes(DType t, int k) {
    static constexpr uint32_t f32[kSpecials] = {0x7fc00001u, 0xffc12345u, 0xff800000u,
                                                0x7f800000u, 0x00000001u, 0x80000000u};
    static constexpr uint16_t f16[kSpecials] = {0x7e01, 0xfe05, 0xfc00, 0x7c00, 0x0001, 0x8000};
    static constexpr uint16_t bf16[kSpecials] = {0x7fc1, 0xffc3, 0xff80, 0x7f80, 0x0001, 0x8000};
    const uint32_t bits = t == DType::kF32 ? f32[k] : t == DType::kF16 ? f16[k] : bf16[k];
    std::vector<uint8_t> b(dtype_size(t));
    for (size_t i = 0; i < b.size(); ++i)
        b[i] = static_cast<uint8_t>(bits >> (8 * i));
    return b;
}

double special_value(DType t, int k) {
    const std::vector<uint8_t> b = special_bytes(t, k);
    if (t == DType::kF32) {
        float f;
        std::memcpy(&f, b.data(), 4);
        return f;
    }
    const auto bits = static_cast<uint16_t>(b[0] | b[1] << 8);
    return t == DType::kF16 ? to_float(Half{bits}) : to_float(BFloat16{bits});
}

double draw(rng::Rng& r, DType t) {
    const double v = std::ldexp(r.uniform(1.0f, 2.0f), static_cast<int>(r.uniform(-10.0f, 9.9f)));
    return round_to(r.uniform() < 0.5 ? -v : v, t);
}

Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType t) {
    Tensor out = Tensor::empty(shape, t);
    for (size_t i = 0; i < v.size(); ++i) {
        uint8_t b[4];
        encode(v[i], t, b);
        std::memcpy(static_cast<char*>(out.data_ptr()) + i * dtype_size(t), b, dtype_size(t));
    }
    return out;
}

// states: 0 none, 1 one value a row, 2 one a column, 3 two a column.
class CacheRowsCase : public OpCase {
public:
    CacheRowsCase(bool pack,
                  DType slot,
                  DType row,
                  int states,
                  int64_t capacity,
                  int64_t cols,
                  int64_t n,
                  bool specials = false)
        : pack_(pack),
          slot_(slot),
          row_(row),
          states_(states),
          capacity_(capacity),
          cols_(cols),
          n_(n),
          specials_(specials) {}

    OpKind kind() const override {
        return pack_ ? OpKind::kCacheRowsPack : OpKind::kCacheRowsUnpack;
    }

    std::string vars() const override {
        return fmt::format("slot={},row={},states={},capacity={},cols={},n={}{}", dtype_name(slot_),
                           dtype_name(row_), states_, capacity_, cols_, n_,
                           specials_ ? ",specials" : "");
    }

    int64_t s1_cols() const { return states_ == 0 ? 0 : states_ == 1 ? 1 : cols_; }

    int64_t s2_cols() const { return states_ == 3 ? cols_ : 0; }

    int64_t payload_bytes() const {
        return kernels::cache_payload_bytes(cols_, row_, s1_cols(), s2_cols());
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 3);
        auto values = [&](int64_t count, DType t) {
            std::vector<double> v(static_cast<size_t>(count));
            for (double& x : v)
                x = draw(r, t);
            return v;
        };
        w_ = values(capacity_ * cols_, slot_);
        s1_ = values(capacity_ * s1_cols(), DType::kF32);
        s2_ = values(capacity_ * s2_cols(), DType::kF32);
        rows_ = values(n_ * cols_, row_);
        rs1_ = values(n_ * s1_cols(), DType::kF32);
        rs2_ = values(n_ * s2_cols(), DType::kF32);
        std::vector<int64_t> all(static_cast<size_t>(capacity_));
        std::iota(all.begin(), all.end(), 0);
        for (int64_t i = capacity_ - 1; i > 0; --i)  // Fisher-Yates: distinct slots, any order
            std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(r.randint(0, i + 1))]);
        slots_.assign(all.begin(), all.begin() + n_);
        if (specials_) {
            for (int64_t i = 0; i < capacity_; ++i)
                plant(w_.data() + i * cols_, slot_);
            for (int64_t i = 0; i < n_; ++i)
                plant(rows_.data() + i * cols_, row_);
        }
        // Column by column, so that a special value's own bytes go in (encode takes normals).
        weights_ = Tensor::empty({capacity_, cols_}, slot_);
        for (int64_t i = 0; i < capacity_ * cols_; ++i)
            encode_at(w_[static_cast<size_t>(i)], i % cols_, slot_,
                      static_cast<uint8_t*>(weights_.data_ptr()) +
                          i * static_cast<int64_t>(dtype_size(slot_)));
        state1_ =
            tensor_of(s1_, states_ == 1 ? Shape{capacity_} : Shape{capacity_, cols_}, DType::kF32);
        state2_ = tensor_of(s2_, {capacity_, cols_}, DType::kF32);
        slot_t_ = Tensor::from_vector(slots_);
        std::vector<uint8_t> p(static_cast<size_t>(n_ * payload_bytes()));
        for (int64_t i = 0; i < n_; ++i) {
            uint8_t* q = p.data() + i * payload_bytes();
            for (int64_t j = 0; j < cols_; ++j, q += dtype_size(row_))
                encode_at(rows_[static_cast<size_t>(i * cols_ + j)], j, row_, q);
            for (int64_t j = 0; j < s1_cols(); ++j, q += 4)
                encode(rs1_[static_cast<size_t>(i * s1_cols() + j)], DType::kF32, q);
            for (int64_t j = 0; j < s2_cols(); ++j, q += 4)
                encode(rs2_[static_cast<size_t>(i * s2_cols() + j)], DType::kF32, q);
        }
        payloads_ = Tensor::from_vector(p);
    }

    std::vector<RefOutput> reference() const override {
        auto out = [](std::string name, std::vector<double> v) {
            std::vector<double> mag(v.size());
            for (size_t i = 0; i < v.size(); ++i)
                mag[i] = std::fabs(v[i]);
            return RefOutput{std::move(name), std::move(v), std::move(mag)};
        };
        if (pack_) {
            std::vector<double> bytes(static_cast<size_t>(n_ * payload_bytes()));
            for (int64_t i = 0; i < n_; ++i) {
                const auto s = static_cast<size_t>(slots_[static_cast<size_t>(i)]);
                std::vector<uint8_t> q(static_cast<size_t>(payload_bytes()));
                uint8_t* p = q.data();
                for (int64_t j = 0; j < cols_; ++j, p += dtype_size(row_))
                    encode_at(
                        round_to(w_[s * static_cast<size_t>(cols_) + static_cast<size_t>(j)], row_),
                        j, row_, p);
                for (int64_t j = 0; j < s1_cols(); ++j, p += 4)
                    encode(s1_[s * static_cast<size_t>(s1_cols()) + static_cast<size_t>(j)],
                           DType::kF32, p);
                for (int64_t j = 0; j < s2_cols(); ++j, p += 4)
                    encode(s2_[s * static_cast<size_t>(s2_cols()) + static_cast<size_t>(j)],
                           DType::kF32, p);
                std::copy(q.begin(), q.end(), bytes.begin() + i * payload_bytes());
            }
            return {out("payloads", std::move(bytes))};
        }
        std::vector<double> w = w_, s1 = s1_, s2 = s2_;
        for (int64_t i = 0; i < n_; ++i) {
            const auto s = static_cast<size_t>(slots_[static_cast<size_t>(i)]);
            for (int64_t j = 0; j < cols_; ++j)
                w[s * static_cast<size_t>(cols_) + static_cast<size_t>(j)] =
                    round_to(rows_[static_cast<size_t>(i * cols_ + j)], slot_);
            for (int64_t j = 0; j < s1_cols(); ++j)
                s1[s * static_cast<size_t>(s1_cols()) + static_cast<size_t>(j)] =
                    rs1_[static_cast<size_t>(i * s1_cols() + j)];
            for (int64_t j = 0; j < s2_cols(); ++j)
                s2[s * static_cast<size_t>(s2_cols()) + static_cast<size_t>(j)] =
                    rs2_[static_cast<size_t>(i * s2_cols() + j)];
        }
        std::vector<RefOutput> refs{out("weights", std::move(w))};
        if (s1_cols() > 0)
            refs.push_back(out("state1", std::move(s1)));
        if (s2_cols() > 0)
            refs.push_back(out("state2", std::move(s2)));
        return refs;
    }

    Tolerance tolerance(size_t /*output*/) const override {
        Tolerance t;
        t.exact = true;
        return t;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        if (pack_) {
            Tensor payloads = make_output({n_ * payload_bytes()}, DType::kU8);
            kernels::cache_rows_pack(in(weights_), s1_cols() > 0 ? &in(state1_) : nullptr,
                                     s2_cols() > 0 ? &in(state2_) : nullptr, in(slot_t_), row_,
                                     payloads, stream());
            return {payloads};
        }
        Tensor w = make_output_like(weights_);
        Tensor s1 = s1_cols() > 0 ? make_output_like(state1_) : Tensor();
        Tensor s2 = s2_cols() > 0 ? make_output_like(state2_) : Tensor();
        kernels::cache_rows_unpack(in(payloads_), in(slot_t_), row_, w,
                                   s1.defined() ? &s1 : nullptr, s2.defined() ? &s2 : nullptr,
                                   stream());
        std::vector<Tensor> outs{w};
        for (const Tensor& s : {s1, s2}) {
            if (s.defined())
                outs.push_back(s);
        }
        return outs;
    }

    // Special values in a row's first columns (one dtype: the case's specials).
    void plant(double* row, DType t) const {
        for (int k = 0; k < kSpecials; ++k)
            row[k] = special_value(t, k);
    }

    // The bytes of column j's value v (a special's own bytes).
    void encode_at(double v, int64_t j, DType t, uint8_t* out) const {
        if (specials_ && j < kSpecials) {
            const std::vector<uint8_t> b = special_bytes(t, static_cast<int>(j));
            std::copy(b.begin(), b.end(), out);
        } else {
            encode(v, t, out);
        }
    }

    double bytes() const override {  // the moved rows, read and written
        return 2.0 * static_cast<double>(n_ * payload_bytes());
    }

private:
    bool pack_;
    DType slot_, row_;
    int states_;
    int64_t capacity_, cols_, n_;
    bool specials_;
    std::vector<double> w_, s1_, s2_, rows_, rs1_, rs2_;
    std::vector<int64_t> slots_;
    Tensor weights_, state1_, state2_, slot_t_, payloads_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    const DType types[] = {DType::kF32, DType::kF16, DType::kBF16};
    for (bool pack : {true, false}) {
        for (DType slot : types) {
            for (DType row : types)
                cases.push_back(std::make_unique<CacheRowsCase>(pack, slot, row, 3, 40, 33, 17));
        }
        for (int states : {0, 1, 2})
            cases.push_back(
                std::make_unique<CacheRowsCase>(pack, DType::kF32, DType::kF16, states, 64, 7, 64));
        cases.push_back(
            std::make_unique<CacheRowsCase>(pack, DType::kF32, DType::kF32, 1, 8, 1, 1));
        cases.push_back(
            std::make_unique<CacheRowsCase>(pack, DType::kF32, DType::kF32, 1, 8, 4, 0));
        cases.push_back(
            std::make_unique<CacheRowsCase>(pack, DType::kBF16, DType::kF32, 1, 4096, 128, 2048));
        for (DType t : types)
            cases.push_back(std::make_unique<CacheRowsCase>(pack, t, t, 3, 40, 33, 17, true));
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
