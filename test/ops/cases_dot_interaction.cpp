// Backend-ops cases of the DLRM dot interaction (kernels/dot_interaction.h): forward and backward
// at odd sizes, F = 0 (dense passes through), and the Criteo shape (F = 26, D = 128, B = 2048)
// as a bench-only case.
#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/dot_interaction.h"
#include "test/ops/dense_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/dot_interaction.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

struct DotShape {
    int64_t B, F, D;
    bool bench;

    int64_t width() const { return D + (F + 1) * F / 2; }

    std::string vars() const { return fmt::format("B={},F={},D={}", B, F, D); }
};

class DotInteractionForwardCase : public OpCase {
public:
    explicit DotInteractionForwardCase(DotShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kDotInteractionForward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override {
        dense_ = random_f32({s_.B, s_.D}, seed, 1);
        sparse_ = random_f32({s_.B, s_.F * s_.D}, seed, 2);
    }

    std::vector<RefOutput> reference() const override {
        return {ref_output("out", ref::dot_interaction_forward(
                                      to_double(dense_), to_double(sparse_), s_.B, s_.F, s_.D))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor out = make_output({s_.B, s_.width()});
        kernels::dot_interaction_forward(in(dense_), in(sparse_), out, stream());
        return {out};
    }

    int64_t terms(size_t /*output*/) const override { return s_.D; }

    // Reads dense and sparse once, writes out.
    double bytes() const override {
        return 4.0 * static_cast<double>(s_.B * (s_.D + s_.F * s_.D + s_.width()));
    }

    double flops() const override {
        return 2.0 * static_cast<double>(s_.B * (s_.width() - s_.D) * s_.D);
    }

private:
    DotShape s_;
    Tensor dense_, sparse_;
};

class DotInteractionBackwardCase : public OpCase {
public:
    explicit DotInteractionBackwardCase(DotShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kDotInteractionBackward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override {
        dense_ = random_f32({s_.B, s_.D}, seed, 1);
        sparse_ = random_f32({s_.B, s_.F * s_.D}, seed, 2);
        grad_out_ = random_f32({s_.B, s_.width()}, seed, 3);
    }

    std::vector<RefOutput> reference() const override {
        ref::DotInteractionGrads g = ref::dot_interaction_backward(
            to_double(dense_), to_double(sparse_), to_double(grad_out_), s_.B, s_.F, s_.D);
        return {ref_output("grad_dense", std::move(g.grad_dense)),
                ref_output("grad_sparse", std::move(g.grad_sparse))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor gd = make_output({s_.B, s_.D});
        Tensor gs = make_output({s_.B, s_.F * s_.D});
        kernels::dot_interaction_backward(in(dense_), in(sparse_), in(grad_out_), gd, gs, stream());
        return {gd, gs};
    }

    // Each gradient element sums F pair terms plus (for dense) the pass-through gradient.
    int64_t terms(size_t /*output*/) const override { return s_.F + 1; }

    // Reads dense, sparse and grad_out, writes both gradients.
    double bytes() const override {
        return 4.0 * static_cast<double>(s_.B * (2 * (s_.D + s_.F * s_.D) + s_.width()));
    }

    double flops() const override {
        return 2.0 * static_cast<double>(s_.B * (s_.F + 1) * s_.F * s_.D);
    }

private:
    DotShape s_;
    Tensor dense_, sparse_, grad_out_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    const std::vector<DotShape> shapes = {{1, 0, 4, false},   {1, 1, 3, false},
                                          {3, 2, 5, false},   {17, 3, 13, false},
                                          {5, 26, 16, false}, {2048, 26, 128, true}};
    for (const DotShape& s : shapes) {
        cases.push_back(std::make_unique<DotInteractionForwardCase>(s));
        cases.push_back(std::make_unique<DotInteractionBackwardCase>(s));
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
