// Backend-ops cases of BCE-with-logits (kernels/bce_with_logits.h): hard and soft labels, [B]
// and [B, 1] logits, B = 1, and logits of +-100 where a naive log(1 + e^x) overflows.
#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/bce_with_logits.h"
#include "test/ops/op_case.h"
#include "test/reference/bce_with_logits.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

struct BceShape {
    int64_t B;
    bool column;   // logits [B, 1] instead of [B]
    bool soft;     // labels in [0, 1] instead of {0, 1}
    bool extreme;  // some logits at +-100
};

class BceWithLogitsCase : public OpCase {
public:
    explicit BceWithLogitsCase(BceShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kBceWithLogits; }

    std::string vars() const override {
        return fmt::format("B={},shape={},labels={},extreme={}", s_.B, s_.column ? "[B,1]" : "[B]",
                           s_.soft ? "soft" : "hard", s_.extreme ? 1 : 0);
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 1);
        std::vector<float> x(static_cast<size_t>(s_.B)), y(x.size());
        for (size_t b = 0; b < x.size(); ++b) {
            x[b] = r.uniform(-8.f, 8.f);
            y[b] = s_.soft ? r.uniform(0.f, 1.f) : (r.uniform() < 0.5 ? 0.f : 1.f);
            if (s_.extreme && b % 3 == 0) {
                x[b] = b % 2 == 0 ? 100.f : -100.f;
            }
        }
        logits_ = Tensor::from_vector(x, s_.column ? Shape{s_.B, 1} : Shape{s_.B});
        labels_ = Tensor::from_vector(y);
    }

    std::vector<RefOutput> reference() const override {
        ref::BceWithLogits r = ref::bce_with_logits(to_double(logits_), to_double(labels_));
        return {RefOutput{"loss", std::move(r.loss.value), std::move(r.loss.mag)},
                RefOutput{"grad_logits", std::move(r.grad.value), std::move(r.grad.mag)}};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor loss = make_output({1});
        Tensor grad = make_output(logits_.shape());
        kernels::bce_with_logits(in(logits_), in(labels_), loss, grad, stream());
        return {loss, grad};
    }

    // Per element: x*y, the max/subtract, exp, log1p and add (the sum is in double); the grad:
    // exp, add, divide, subtract, times 1/B.
    int64_t terms(size_t output) const override { return output == 0 ? 4 : 5; }

    // sigmoid(-100) = 3.7e-44 is subnormal in f32, where only absolute accuracy to the smallest
    // normal float survives.
    Tolerance tolerance(size_t output) const override {
        Tolerance t = OpCase::tolerance(output);
        t.atol = 0x1.0p-126;
        return t;
    }

private:
    BceShape s_;
    Tensor logits_, labels_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (const BceShape& s : std::vector<BceShape>{{1, false, false, false},
                                                   {3, true, false, false},
                                                   {17, false, true, false},
                                                   {1000, true, false, true},
                                                   {33, false, true, true}}) {
        cases.push_back(std::make_unique<BceWithLogitsCase>(s));
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
