// Backend-ops cases of the linear layer (kernels/linear.h): forward and backward for every
// activation, with and without bias, at odd sizes (B = 1, 3, 17; I = 13, 33), plus the
// DLRM/MLPerf MLP shapes at B = 2048 as bench-only cases timed against raw cblas_sgemm.
#include <cmath>

#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/linear.h"
#include "test/ops/dense_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/linear.h"

namespace shardrec::test {
namespace {

using kernels::Activation;
using kernels::OpKind;

struct LinearShape {
    int64_t B, I, O;
    Activation act;
    bool bias;
    bool bench;

    std::string vars() const {
        return fmt::format("B={},I={},O={},act={},bias={}", B, I, O, kernels::activation_name(act),
                           bias ? 1 : 0);
    }
};

// ---- forward ----

class LinearForwardCase : public OpCase {
public:
    explicit LinearForwardCase(LinearShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kLinearForward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override {
        x_ = random_f32({s_.B, s_.I}, seed, 1, -1.f, 1.f);
        w_ = random_f32({s_.O, s_.I}, seed, 2, -1.f, 1.f);
        b_ = random_f32({s_.O}, seed, 3, -1.f, 1.f);
    }

    std::vector<RefOutput> reference() const override {
        return {ref_output("y", ref::linear_forward(to_double(x_), to_double(w_),
                                                    s_.bias ? to_double(b_) : std::vector<double>{},
                                                    s_.B, s_.I, s_.O, to_ref(s_.act)))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor y = make_output({s_.B, s_.O});
        kernels::linear_forward(in(x_), in(w_), s_.bias ? &in(b_) : nullptr, s_.act, y, stream());
        return {y};
    }

    // I products and the bias, then the activation (the sigmoid adds exp, add and divide).
    int64_t terms(size_t /*output*/) const override {
        return s_.I + 1 + (s_.act == Activation::kSigmoid ? 3 : 0);
    }

    // Reads x, w and bias once, writes y (f32).
    double bytes() const override {
        return 4.0 * static_cast<double>(s_.B * s_.I + s_.O * s_.I + s_.O + s_.B * s_.O);
    }

    double flops() const override { return 2.0 * static_cast<double>(s_.B * s_.I * s_.O); }

    std::vector<Gemm> gemms() const override { return {{s_.B, s_.O, s_.I}}; }

private:
    LinearShape s_;
    Tensor x_, w_, b_;
};

// ---- backward ----

class LinearBackwardCase : public OpCase {
public:
    LinearBackwardCase(LinearShape s, bool grad_x) : s_(s), grad_x_(grad_x) {}

    OpKind kind() const override { return OpKind::kLinearBackward; }

    std::string vars() const override { return s_.vars() + (grad_x_ ? ",grad_x=1" : ",grad_x=0"); }

    bool bench_only() const override { return s_.bench; }

    // y is any valid activation output: act(uniform), so relu has exact zeros as in training.
    void make_inputs(uint64_t seed) override {
        x_ = random_f32({s_.B, s_.I}, seed, 1, -1.f, 1.f);
        w_ = random_f32({s_.O, s_.I}, seed, 2, -1.f, 1.f);
        y_ = random_f32({s_.B, s_.O}, seed, 4, -2.f, 2.f);
        float* y = y_.data<float>();
        for (int64_t i = 0; i < y_.numel(); ++i) {
            if (s_.act == Activation::kRelu) {
                y[i] = y[i] > 0.f ? y[i] : 0.f;
            }
            if (s_.act == Activation::kSigmoid) {
                y[i] = 1.f / (1.f + std::exp(-y[i]));
            }
        }
        grad_y_ = random_f32({s_.B, s_.O}, seed, 5, -1.f, 1.f);
    }

    std::vector<RefOutput> reference() const override {
        ref::LinearGrads g =
            ref::linear_backward(to_double(x_), to_double(w_), to_double(y_), to_double(grad_y_),
                                 s_.B, s_.I, s_.O, to_ref(s_.act));
        std::vector<RefOutput> out;
        if (grad_x_) {
            out.push_back(ref_output("grad_x", std::move(g.grad_x)));
        }
        out.push_back(ref_output("grad_w", std::move(g.grad_w)));
        if (s_.bias) {
            out.push_back(ref_output("grad_b", std::move(g.grad_b)));
        }
        return out;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor gx = grad_x_ ? make_output({s_.B, s_.I}) : Tensor();
        Tensor gw = make_output({s_.O, s_.I});
        Tensor gb = s_.bias ? make_output({s_.O}) : Tensor();
        kernels::linear_backward(in(x_), in(w_), in(y_), in(grad_y_), s_.act,
                                 grad_x_ ? &gx : nullptr, gw, s_.bias ? &gb : nullptr, stream());
        std::vector<Tensor> out;
        if (grad_x_) {
            out.push_back(gx);
        }
        out.push_back(gw);
        if (s_.bias) {
            out.push_back(gb);
        }
        return out;
    }

    // g = grad_y * act'(y) costs up to 3 roundings; then O (grad_x) or B (grad_w, grad_b) terms.
    int64_t terms(size_t output) const override {
        const bool is_grad_x = grad_x_ && output == 0;
        return (is_grad_x ? s_.O : s_.B) + 3;
    }

    // Reads x, w, y, grad_y; writes grad_x, grad_w, grad_b.
    double bytes() const override {
        const auto e = static_cast<double>(s_.B * s_.I + 2 * s_.O * s_.I + 2 * s_.B * s_.O +
                                           (grad_x_ ? s_.B * s_.I : 0) + s_.O);
        return 4.0 * e;
    }

    double flops() const override {
        return (grad_x_ ? 4.0 : 2.0) * static_cast<double>(s_.B * s_.I * s_.O);
    }

    std::vector<Gemm> gemms() const override {
        std::vector<Gemm> g{{s_.O, s_.I, s_.B}};
        if (grad_x_) {
            g.push_back({s_.B, s_.I, s_.O});
        }
        return g;
    }

private:
    LinearShape s_;
    bool grad_x_;
    Tensor x_, w_, y_, grad_y_;
};

std::vector<LinearShape> linear_shapes() {
    std::vector<LinearShape> shapes;
    for (Activation act : {Activation::kIdentity, Activation::kRelu, Activation::kSigmoid}) {
        shapes.push_back({1, 13, 7, act, true, false});
        shapes.push_back({3, 33, 16, act, true, false});
        shapes.push_back({17, 13, 33, act, false, false});
        shapes.push_back({17, 64, 1, act, true, false});
        shapes.push_back({130, 33, 20, act, true, false});  // grad_b: three row blocks on CUDA
    }
    // DLRM / MLPerf DLRM-DCN MLP layers (bottom 13-512-256-128, top 3456-1024-1024-512-256) at
    // a per-rank batch of 2048.
    for (auto [I, O] : std::vector<std::pair<int64_t, int64_t>>{
             {13, 512}, {512, 256}, {3456, 1024}, {1024, 1024}, {1024, 512}}) {
        shapes.push_back({2048, I, O, Activation::kRelu, true, true});
    }
    return shapes;
}

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (const LinearShape& s : linear_shapes()) {
        cases.push_back(std::make_unique<LinearForwardCase>(s));
        cases.push_back(std::make_unique<LinearBackwardCase>(s, true));
        if (!s.bench && s.B == 3) {
            cases.push_back(std::make_unique<LinearBackwardCase>(s, false));
        }
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
