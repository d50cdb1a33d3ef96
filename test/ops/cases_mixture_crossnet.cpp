// Backend-ops cases of one LowRankMixtureCrossNet layer (kernels/mixture_crossnet.h), forward and
// backward: one expert (gate skipped) and several, relu / sigmoid / identity experts, odd sizes,
// x0 and xl shared or distinct, plus a DCN-sized bench-only case.
#include <cmath>

#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/mixture_crossnet.h"
#include "test/ops/dense_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/mixture_crossnet.h"

namespace shardrec::test {
namespace {

using kernels::Activation;
using kernels::OpKind;

struct MixtureShape {
    int64_t B, N, K, r;
    Activation act;
    bool same_input;
    bool bench;

    std::string vars() const {
        return fmt::format("B={},N={},K={},r={},act={},x0_is_xl={}", B, N, K, r,
                           kernels::activation_name(act), same_input ? 1 : 0);
    }

    int64_t sig() const { return act == Activation::kSigmoid ? 3 : 0; }
};

struct MixtureInputs {
    Tensor x0, xl, u, c, v, bias, gates;

    void make(const MixtureShape& s, uint64_t seed) {
        x0 = random_f32({s.B, s.N}, seed, 1);
        xl = s.same_input ? x0 : random_f32({s.B, s.N}, seed, 2);
        u = random_f32({s.K, s.N, s.r}, seed, 3);
        c = random_f32({s.K, s.r, s.r}, seed, 4);
        v = random_f32({s.K, s.r, s.N}, seed, 5);
        bias = random_f32({s.N}, seed, 6);
        gates = s.K > 1 ? random_f32({s.K, s.N}, seed, 7) : Tensor();
    }

    kernels::MixtureCrossNetWeights weights() const {
        return {&u, &c, &v, &bias, gates.defined() ? &gates : nullptr};
    }

    ref::MixtureCrossNetParams params(const MixtureShape& s) const {
        ref::MixtureCrossNetParams p;
        p.B = s.B, p.N = s.N, p.K = s.K, p.r = s.r, p.act = to_ref(s.act);
        p.u = to_double(u), p.c = to_double(c), p.v = to_double(v), p.bias = to_double(bias);
        if (s.K > 1) {
            p.gates = to_double(gates);
        }
        return p;
    }
};

// The layer's parameters on the case's run device.
kernels::MixtureCrossNetWeights on_device(OpCase& c, const kernels::MixtureCrossNetWeights& w) {
    return {c.in(w.u), c.in(w.c), c.in(w.v), c.in(w.bias), c.in(w.gates)};
}

class MixtureCrossNetForwardCase : public OpCase {
public:
    explicit MixtureCrossNetForwardCase(MixtureShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kMixtureCrossNetForward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override { in_.make(s_, seed); }

    std::vector<RefOutput> reference() const override {
        ref::MixtureCrossNetForward f =
            ref::mixture_crossnet_forward(in_.params(s_), to_double(in_.x0), to_double(in_.xl));
        std::vector<RefOutput> out{
            ref_output("out", std::move(f.out)), ref_output("a1", std::move(f.a1)),
            ref_output("a2", std::move(f.a2)), ref_output("e", std::move(f.e))};
        if (s_.K > 1) {
            out.push_back(ref_output("probs", std::move(f.probs)));
        }
        return out;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor out = make_output({s_.B, s_.N});
        Tensor a1 = make_output({s_.B, s_.K, s_.r});
        Tensor a2 = make_output({s_.B, s_.K, s_.r});
        Tensor e = make_output({s_.B, s_.K, s_.N});
        Tensor probs = s_.K > 1 ? make_output({s_.B, s_.K}) : Tensor();
        kernels::mixture_crossnet_forward(in(in_.x0), in(in_.xl), on_device(*this, in_.weights()),
                                          s_.act, out, {&a1, &a2, &e, s_.K > 1 ? &probs : nullptr},
                                          stream());
        if (s_.K > 1) {
            return {out, a1, a2, e, probs};
        }
        return {out, a1, a2, e};
    }

    // Chains: a1 N products (+ sigmoid); a2 + r; e + r and the bias; probs N products, exp and
    // the K-term normalisation; out the longest of e and probs, then x0, p, K experts and xl.
    int64_t terms(size_t output) const override {
        switch (output) {
            case 1:
                return s_.N + s_.sig();
            case 2:
                return s_.N + s_.r + 2 * s_.sig();
            case 3:
                return s_.N + 2 * s_.r + 1 + 2 * s_.sig();
            case 4:
                return s_.N + s_.K + 4;
            default:
                return s_.N + 2 * s_.r + s_.K + 8 + 2 * s_.sig();
        }
    }

    double flops() const override {
        const auto b = static_cast<double>(s_.B), n = static_cast<double>(s_.N);
        const auto k = static_cast<double>(s_.K), r = static_cast<double>(s_.r);
        return 2 * b * k * (2 * n * r + r * r) + (s_.K > 1 ? 2 * b * k * n : 0);
    }

    std::vector<Gemm> gemms() const override {
        std::vector<Gemm> g{{s_.B, s_.K * s_.r, s_.N}};
        for (int64_t k = 0; k < s_.K; ++k) {
            g.push_back({s_.B, s_.r, s_.r});
            g.push_back({s_.B, s_.N, s_.r});
        }
        if (s_.K > 1) {
            g.push_back({s_.B, s_.K, s_.N});
        }
        return g;
    }

private:
    MixtureShape s_;
    MixtureInputs in_;
};

// Saved activations must be valid outputs of the activation (relu: >= 0 with exact zeros;
// sigmoid: in (0, 1)), since the backward derives act' from them; probs are a softmax.
Tensor random_activation(const Shape& shape, Activation act, uint64_t seed, uint64_t stream) {
    Tensor t = random_f32(shape, seed, stream);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
        if (act == Activation::kRelu) {
            p[i] = p[i] > 0.f ? p[i] : 0.f;
        }
        if (act == Activation::kSigmoid) {
            p[i] = 1.f / (1.f + std::exp(-2.f * p[i]));
        }
    }
    return t;
}

Tensor random_softmax(int64_t B, int64_t K, uint64_t seed, uint64_t stream) {
    Tensor t = random_f32({B, K}, seed, stream);
    float* p = t.data<float>();
    for (int64_t b = 0; b < B; ++b) {
        float sum = 0.f;
        for (int64_t k = 0; k < K; ++k) {
            sum += (p[b * K + k] = std::exp(p[b * K + k]));
        }
        for (int64_t k = 0; k < K; ++k) {
            p[b * K + k] /= sum;
        }
    }
    return t;
}

// With alias, grads.xl is the grads.x0 tensor (as the module passes it at layer 0) and the one
// output holds their sum.
class MixtureCrossNetBackwardCase : public OpCase {
public:
    MixtureCrossNetBackwardCase(MixtureShape s, bool alias) : s_(s), alias_(alias) {}

    OpKind kind() const override { return OpKind::kMixtureCrossNetBackward; }

    std::string vars() const override { return s_.vars() + (alias_ ? ",grad_xl=grad_x0" : ""); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override {
        in_.make(s_, seed);
        a1_ = random_activation({s_.B, s_.K, s_.r}, s_.act, seed, 8);
        a2_ = random_activation({s_.B, s_.K, s_.r}, s_.act, seed, 9);
        e_ = random_f32({s_.B, s_.K, s_.N}, seed, 10);
        probs_ = s_.K > 1 ? random_softmax(s_.B, s_.K, seed, 11) : Tensor();
        grad_out_ = random_f32({s_.B, s_.N}, seed, 12);
        grad_x0_init_ = random_f32({s_.B, s_.N}, seed, 13);
        grad_gates_init_ = s_.K > 1 ? random_f32({s_.K, s_.N}, seed, 14) : Tensor();
    }

    std::vector<RefOutput> reference() const override {
        const ref::MixtureCrossNetSavedValues saved{
            to_double(a1_), to_double(a2_), to_double(e_),
            s_.K > 1 ? to_double(probs_) : std::vector<double>{}};
        ref::MixtureCrossNetGrads g = ref::mixture_crossnet_backward(
            in_.params(s_), to_double(in_.x0), to_double(in_.xl), saved, to_double(grad_out_),
            to_double(grad_x0_init_),
            s_.K > 1 ? to_double(grad_gates_init_) : std::vector<double>{});
        std::vector<RefOutput> out;
        if (alias_) {
            out.push_back(ref_output("grad_x0+grad_xl", ref::add(g.x0, g.xl)));
        } else {
            out.push_back(ref_output("grad_x0", std::move(g.x0)));
            out.push_back(ref_output("grad_xl", std::move(g.xl)));
        }
        out.push_back(ref_output("grad_u", std::move(g.u)));
        out.push_back(ref_output("grad_c", std::move(g.c)));
        out.push_back(ref_output("grad_v", std::move(g.v)));
        out.push_back(ref_output("grad_bias", std::move(g.bias)));
        if (s_.K > 1) {
            out.push_back(ref_output("grad_gates", std::move(g.gates)));
        }
        return out;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor gx0 = make_output_like(grad_x0_init_);
        Tensor gxl = alias_ ? gx0 : make_output({s_.B, s_.N});
        Tensor gu = make_output({s_.K, s_.N, s_.r});
        Tensor gc = make_output({s_.K, s_.r, s_.r});
        Tensor gv = make_output({s_.K, s_.r, s_.N});
        Tensor gb = make_output({s_.N});
        Tensor gg = s_.K > 1 ? make_output_like(grad_gates_init_) : Tensor();
        const kernels::MixtureCrossNetSaved saved{&in(a1_), &in(a2_), &in(e_),
                                                  s_.K > 1 ? &in(probs_) : nullptr};
        kernels::mixture_crossnet_backward(
            in(in_.x0), in(in_.xl), on_device(*this, in_.weights()), s_.act, saved, in(grad_out_),
            {&gx0, &gxl, &gu, &gc, &gv, &gb, s_.K > 1 ? &gg : nullptr}, stream());
        std::vector<Tensor> out{gx0};
        if (!alias_) {
            out.push_back(gxl);
        }
        for (const Tensor& t : {gu, gc, gv, gb}) {
            out.push_back(t);
        }
        if (s_.K > 1) {
            out.push_back(gg);
        }
        return out;
    }

    // One bound for every gradient, from the longest chain (grad_xl / grad_v: grad_out * p * x0,
    // N products through U, r through C, act' twice, B rows or K r columns, plus the gate path's
    // N + 2K): small next to 1/u for the shapes tested, so still sharp.
    int64_t terms(size_t /*output*/) const override {
        return s_.B + s_.N + s_.r + s_.K * s_.r + 2 * s_.K + 12;
    }

    double flops() const override {
        const auto b = static_cast<double>(s_.B), n = static_cast<double>(s_.N);
        const auto k = static_cast<double>(s_.K), r = static_cast<double>(s_.r);
        return 4 * b * k * (2 * n * r + r * r) + (s_.K > 1 ? 6 * b * k * n : 0);
    }

private:
    MixtureShape s_;
    bool alias_;
    MixtureInputs in_;
    Tensor a1_, a2_, e_, probs_, grad_out_, grad_x0_init_, grad_gates_init_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    const std::vector<MixtureShape> shapes = {{1, 13, 1, 1, Activation::kRelu, true, false},
                                              {3, 10, 1, 3, Activation::kRelu, true, false},
                                              {3, 10, 4, 2, Activation::kRelu, true, false},
                                              {17, 33, 3, 4, Activation::kSigmoid, false, false},
                                              {5, 13, 2, 3, Activation::kIdentity, false, false},
                                              {2048, 512, 4, 64, Activation::kRelu, false, true}};
    for (const MixtureShape& s : shapes) {
        cases.push_back(std::make_unique<MixtureCrossNetForwardCase>(s));
        cases.push_back(std::make_unique<MixtureCrossNetBackwardCase>(s, false));
        if (s.same_input) {
            cases.push_back(std::make_unique<MixtureCrossNetBackwardCase>(s, true));
        }
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
