// Backend-ops cases of the element-wise ops (kernels/elementwise.h): add_ on 1-D and 2-D tensors,
// a single element, none, and sizes that do not fill a CUDA block; columns_axpy written and
// accumulated, dividing and multiplying by the reciprocal, with and without row divisors, between
// two tensors and in place, and its untouched columns compared too; fill_ over the same sizes.
#include <cmath>
#include <string>

#include "engine/core/rng.h"
#include "kernels/elementwise.h"
#include "test/ops/op_case.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

class AddCase : public OpCase {
public:
    explicit AddCase(Shape shape) : shape_(std::move(shape)) {}

    OpKind kind() const override { return OpKind::kAdd; }

    std::string vars() const override { return "shape=" + shape_str(shape_); }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 1);
        std::vector<float> a(static_cast<size_t>(shape_numel(shape_))), b(a.size());
        for (size_t i = 0; i < a.size(); ++i) {
            a[i] = r.uniform(-4.f, 4.f);
            b[i] = r.uniform(-4.f, 4.f);
        }
        a_ = Tensor::from_vector(a, shape_);
        b_ = Tensor::from_vector(b, shape_);
    }

    std::vector<RefOutput> reference() const override {
        const std::vector<double> a = to_double(a_), b = to_double(b_);
        std::vector<double> sum(a.size()), mag(a.size());
        for (size_t i = 0; i < a.size(); ++i) {
            sum[i] = a[i] + b[i];
            mag[i] = std::fabs(a[i]) + std::fabs(b[i]);
        }
        return {RefOutput{"a", std::move(sum), std::move(mag)}};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor a = make_output_like(a_);
        kernels::add_(a, in(b_), stream());
        return {a};
    }

private:
    Shape shape_;
    Tensor a_, b_;
};

class FillCase : public OpCase {
public:
    // listed > 0: only that many rows (random, repeats included) are set.
    FillCase(Shape shape, float value, int64_t listed = 0)
        : shape_(std::move(shape)), value_(value), listed_(listed) {}

    OpKind kind() const override { return OpKind::kFill; }

    std::string vars() const override {
        return fmt::format("shape={},value={}{}", shape_str(shape_), value_,
                           listed_ > 0 ? fmt::format(",listed={}", listed_) : "");
    }

    void make_inputs(uint64_t seed) override {  // what fill_ overwrites
        rng::Rng r(seed, 1);
        std::vector<float> a(static_cast<size_t>(shape_numel(shape_)));
        for (float& x : a)
            x = r.uniform(-4.f, 4.f);
        a_ = Tensor::from_vector(a, shape_);
        std::vector<int64_t> which;
        for (int64_t i = 0; i < listed_; ++i)  // every third a repeat of the one before
            which.push_back(
                i % 3 == 2 ? which.back()
                           : static_cast<int64_t>(r.next_u64() % static_cast<uint64_t>(shape_[0])));
        which_ = Tensor::from_vector(which);
    }

    std::vector<RefOutput> reference() const override {
        const auto n = static_cast<size_t>(shape_numel(shape_));
        if (listed_ == 0) {
            const std::vector<double> v(n, value_);
            return {RefOutput{"a", v, v}};
        }
        std::vector<double> v(a_.data<float>(), a_.data<float>() + n);
        const size_t width = n / static_cast<size_t>(shape_[0]);
        for (int64_t i = 0; i < listed_; ++i) {
            const auto row = static_cast<size_t>(which_.data<int64_t>()[i]);
            std::fill(v.begin() + static_cast<std::ptrdiff_t>(row * width),
                      v.begin() + static_cast<std::ptrdiff_t>((row + 1) * width), value_);
        }
        std::vector<double> mag(v.size());
        for (size_t i = 0; i < v.size(); ++i)
            mag[i] = std::fabs(v[i]);
        return {RefOutput{"a", v, mag}};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor a = make_output_like(a_);
        kernels::fill_(a, value_, stream(), listed_ > 0 ? &in(which_) : nullptr);
        return {a};
    }

private:
    Shape shape_;
    float value_;
    int64_t listed_;
    Tensor a_, which_;
};

struct ColumnsAxpyVars {
    int64_t rows, dst_cols, dst_col, src_cols, src_col, n;
    float divisor;
    bool row_divisor, reciprocal, accumulate, in_place;  // in_place: src is dst, same columns
};

class ColumnsAxpyCase : public OpCase {
public:
    explicit ColumnsAxpyCase(ColumnsAxpyVars v) : v_(v) {}

    OpKind kind() const override { return OpKind::kColumnsAxpy; }

    std::string vars() const override {
        return "rows=" + std::to_string(v_.rows) + ",dst=[" + std::to_string(v_.dst_cols) + "]@" +
               std::to_string(v_.dst_col) +
               (v_.in_place
                    ? ",in_place"
                    : ",src=[" + std::to_string(v_.src_cols) + "]@" + std::to_string(v_.src_col)) +
               ",n=" + std::to_string(v_.n) + ",divisor=" + std::to_string(v_.divisor) +
               ",row_divisor=" + std::to_string(v_.row_divisor) +
               (v_.reciprocal ? ",times_reciprocal" : ",divide") +
               ",accumulate=" + std::to_string(v_.accumulate);
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 2);
        auto random = [&](int64_t rows, int64_t cols) {
            std::vector<float> v(static_cast<size_t>(rows * cols));
            for (float& x : v)
                x = r.uniform(-4.f, 4.f);
            return Tensor::from_vector(v, {rows, cols});
        };
        dst_ = random(v_.rows, v_.dst_cols);
        src_ = v_.in_place ? dst_ : random(v_.rows, v_.src_cols);
        // Row divisors like bag lengths: 1 to 40, most not powers of two.
        std::vector<float> lengths(static_cast<size_t>(v_.rows));
        for (float& x : lengths)
            x = static_cast<float>(1 + static_cast<int>(r.uniform(0.f, 40.f)));
        divisor_ = v_.row_divisor ? Tensor::from_vector(lengths, {v_.rows}) : Tensor();
    }

    std::vector<RefOutput> reference() const override {
        const std::vector<double> d = to_double(dst_), s = to_double(src_);
        const std::vector<double> rd = v_.row_divisor ? to_double(divisor_) : std::vector<double>();
        const int64_t sc = v_.in_place ? v_.dst_cols : v_.src_cols;
        const int64_t s0 = v_.in_place ? v_.dst_col : v_.src_col;
        std::vector<double> value = d, mag(d.size());
        for (size_t i = 0; i < d.size(); ++i)
            mag[i] = std::fabs(d[i]);
        for (int64_t b = 0; b < v_.rows; ++b) {
            const double div = v_.divisor * (v_.row_divisor ? rd[static_cast<size_t>(b)] : 1.0);
            for (int64_t j = 0; j < v_.n; ++j) {
                const auto di = static_cast<size_t>(b * v_.dst_cols + v_.dst_col + j);
                double term = s[static_cast<size_t>(b * sc + s0 + j)] / div;
                if (exact()) {  // one correctly rounded f32 division (the f64 quotient, rounded)
                    term = static_cast<float>(term);
                }
                value[di] = (v_.accumulate ? d[di] : 0.0) + term;
                mag[di] = (v_.accumulate ? std::fabs(d[di]) : 0.0) + std::fabs(term);
            }
        }
        return {RefOutput{"dst", std::move(value), std::move(mag)}};
    }

    // divisor * row divisor, the division (or reciprocal and product), plus dst
    int64_t terms(size_t) const override { return 4; }

    // A written block of divisions is exact: x / s_b is the f32 division itself (row divisors
    // are small integers, so s_b is exact), which the sharded MEAN forward and the gradient
    // division rely on to equal unsharded results bit for bit.
    Tolerance tolerance(size_t output) const override {
        if (!exact()) {
            return OpCase::tolerance(output);
        }
        Tolerance t;
        t.exact = true;
        return t;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor dst = make_output_like(dst_);
        const int64_t src_col = v_.in_place ? v_.dst_col : v_.src_col;
        kernels::columns_axpy(dst, v_.dst_col, v_.in_place ? dst : in(src_), src_col, v_.n,
                              v_.divisor, v_.row_divisor ? &in(divisor_) : nullptr,
                              v_.reciprocal ? kernels::ColumnsScale::kTimesReciprocal
                                            : kernels::ColumnsScale::kDivide,
                              v_.accumulate, stream());
        return {dst};
    }

private:
    bool exact() const { return !v_.accumulate && !v_.reciprocal; }

    ColumnsAxpyVars v_;
    Tensor dst_, src_, divisor_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (const Shape& s : std::vector<Shape>{{1}, {0}, {37}, {64, 33}, {1000, 3}})
        cases.push_back(std::make_unique<AddCase>(s));
    for (const Shape& s : std::vector<Shape>{{1}, {0}, {37}, {64, 33}, {1000, 3}})
        cases.push_back(std::make_unique<FillCase>(s, 0.1f));
    cases.push_back(std::make_unique<FillCase>(Shape{300}, 0.f));
    // Listed rows (the optimizer state of evicted rows): row-wise [R] and [R, D] states.
    cases.push_back(std::make_unique<FillCase>(Shape{300}, 0.f, 40));
    cases.push_back(std::make_unique<FillCase>(Shape{64, 33}, 0.f, 20));
    cases.push_back(std::make_unique<FillCase>(Shape{1000, 3}, 0.5f, 1));
    for (const ColumnsAxpyVars& v :
         std::vector<ColumnsAxpyVars>{{1, 1, 0, 1, 0, 1, 1.0f, false, false, false, false},
                                      {37, 40, 8, 24, 3, 16, 1.0f, false, false, true, false},
                                      {37, 40, 8, 24, 3, 16, 1.0f, true, false, false, false},
                                      {37, 40, 8, 24, 3, 16, 1.0f, true, true, false, false},
                                      {300, 129, 1, 200, 71, 128, 3.0f, true, false, true, false},
                                      {300, 64, 16, 64, 16, 32, 1.0f, true, false, false, true},
                                      {300, 64, 16, 64, 16, 32, 1.0f, true, true, false, true},
                                      {1000, 9, 0, 9, 0, 9, 7.0f, false, false, false, true},
                                      {0, 8, 0, 8, 0, 8, 1.0f, true, false, true, false},
                                      {5, 8, 4, 8, 0, 0, 1.0f, false, false, true, false}})
        cases.push_back(std::make_unique<ColumnsAxpyCase>(v));
    return cases;
});

}  // namespace
}  // namespace shardrec::test
