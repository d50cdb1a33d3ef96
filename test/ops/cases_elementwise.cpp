// Backend-ops cases of the element-wise ops (kernels/elementwise.h): add_ on 1-D and 2-D tensors,
// a single element, none, and sizes that do not fill a CUDA block.
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

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (const Shape& s : std::vector<Shape>{{1}, {0}, {37}, {64, 33}, {1000, 3}})
        cases.push_back(std::make_unique<AddCase>(s));
    return cases;
});

}  // namespace
}  // namespace shardrec::test
