// Backend-ops cases of the FactorizationMachine (kernels/factorization_machine.h): forward and
// backward at odd sizes, N = 1 (no pairs: out = 0), TorchRec's DeepFM example width (192) and a
// bench-only Criteo-sized case.
#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/factorization_machine.h"
#include "test/ops/dense_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/factorization_machine.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

struct FmShape {
    int64_t B, N;
    bool bench;

    std::string vars() const { return fmt::format("B={},N={}", B, N); }
};

class FactorizationMachineForwardCase : public OpCase {
public:
    explicit FactorizationMachineForwardCase(FmShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kFactorizationMachineForward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override { x_ = random_f32({s_.B, s_.N}, seed, 1); }

    std::vector<RefOutput> reference() const override {
        return {ref_output("out", ref::factorization_machine_forward(to_double(x_), s_.B, s_.N))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor out = make_output({s_.B, 1});
        kernels::factorization_machine_forward(in(x_), out, stream());
        return {out};
    }

    // N-term sums, the square, the difference and the halving.
    int64_t terms(size_t /*output*/) const override { return s_.N + 3; }

    double bytes() const override { return 4.0 * static_cast<double>(s_.B * (s_.N + 1)); }

private:
    FmShape s_;
    Tensor x_;
};

class FactorizationMachineBackwardCase : public OpCase {
public:
    explicit FactorizationMachineBackwardCase(FmShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kFactorizationMachineBackward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override {
        x_ = random_f32({s_.B, s_.N}, seed, 1);
        grad_out_ = random_f32({s_.B, 1}, seed, 2);
    }

    std::vector<RefOutput> reference() const override {
        return {ref_output("grad_x", ref::factorization_machine_backward(
                                         to_double(x_), to_double(grad_out_), s_.B, s_.N))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor gx = make_output({s_.B, s_.N});
        kernels::factorization_machine_backward(in(x_), in(grad_out_), gx, stream());
        return {gx};
    }

    // The N-term row sum, minus x, times grad_out.
    int64_t terms(size_t /*output*/) const override { return s_.N + 2; }

    double bytes() const override { return 4.0 * static_cast<double>(s_.B * (2 * s_.N + 1)); }

private:
    FmShape s_;
    Tensor x_, grad_out_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    const std::vector<FmShape> shapes = {
        {1, 1, false}, {3, 7, false}, {17, 33, false}, {4, 192, false}, {2048, 3456, true}};
    for (const FmShape& s : shapes) {
        cases.push_back(std::make_unique<FactorizationMachineForwardCase>(s));
        cases.push_back(std::make_unique<FactorizationMachineBackwardCase>(s));
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
