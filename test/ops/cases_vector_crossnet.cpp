// Backend-ops cases of one VectorCrossNet layer (kernels/vector_crossnet.h), forward and
// backward, at odd sizes, with x0 and xl the same tensor (layer 0) or distinct.
#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/vector_crossnet.h"
#include "test/ops/dense_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/vector_crossnet.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

struct VectorShape {
    int64_t B, N;
    bool same_input;
    bool bench;

    std::string vars() const {
        return fmt::format("B={},N={},x0_is_xl={}", B, N, same_input ? 1 : 0);
    }
};

struct VectorInputs {
    Tensor x0, xl, w, bias;

    void make(const VectorShape& s, uint64_t seed) {
        x0 = random_f32({s.B, s.N}, seed, 1);
        xl = s.same_input ? x0 : random_f32({s.B, s.N}, seed, 2);
        w = random_f32({s.N}, seed, 3);
        bias = random_f32({s.N}, seed, 4);
    }
};

class VectorCrossNetForwardCase : public OpCase {
public:
    explicit VectorCrossNetForwardCase(VectorShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kVectorCrossNetForward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override { in_.make(s_, seed); }

    std::vector<RefOutput> reference() const override {
        ref::VectorCrossNetForward f =
            ref::vector_crossnet_forward(to_double(in_.x0), to_double(in_.xl), to_double(in_.w),
                                         to_double(in_.bias), s_.B, s_.N);
        return {ref_output("out", std::move(f.out)), ref_output("s", std::move(f.s))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor out = make_output({s_.B, s_.N});
        Tensor dots = make_output({s_.B});
        kernels::vector_crossnet_forward(in(in_.x0), in(in_.xl), in(in_.w), in(in_.bias), out, dots,
                                         stream());
        return {out, dots};
    }

    // s: N products; out: * x0, + b, + xl.
    int64_t terms(size_t output) const override { return output == 0 ? s_.N + 3 : s_.N; }

    // Reads x0, xl (once when shared), w, bias; writes out and s.
    double bytes() const override {
        const auto bn = static_cast<double>(s_.B * s_.N);
        return 4.0 * ((s_.same_input ? 2 : 3) * bn + 2.0 * static_cast<double>(s_.N) +
                      static_cast<double>(s_.B));
    }

private:
    VectorShape s_;
    VectorInputs in_;
};

// With alias, grad_xl is the grad_x0 tensor (as the module passes it at layer 0) and the one
// output holds grad_x0 + grad_xl.
class VectorCrossNetBackwardCase : public OpCase {
public:
    VectorCrossNetBackwardCase(VectorShape s, bool alias) : s_(s), alias_(alias) {}

    OpKind kind() const override { return OpKind::kVectorCrossNetBackward; }

    std::string vars() const override { return s_.vars() + (alias_ ? ",grad_xl=grad_x0" : ""); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override {
        in_.make(s_, seed);
        s_saved_ = random_f32({s_.B}, seed, 5);
        grad_out_ = random_f32({s_.B, s_.N}, seed, 6);
        grad_x0_init_ = random_f32({s_.B, s_.N}, seed, 7);
    }

    std::vector<RefOutput> reference() const override {
        ref::VectorCrossNetGrads g = ref::vector_crossnet_backward(
            to_double(in_.x0), to_double(in_.xl), to_double(in_.w), to_double(s_saved_),
            to_double(grad_out_), to_double(grad_x0_init_), s_.B, s_.N);
        if (alias_) {
            return {ref_output("grad_x0+grad_xl", ref::add(g.grad_x0, g.grad_xl)),
                    ref_output("grad_w", std::move(g.grad_w)),
                    ref_output("grad_b", std::move(g.grad_b))};
        }
        return {ref_output("grad_x0", std::move(g.grad_x0)),
                ref_output("grad_xl", std::move(g.grad_xl)),
                ref_output("grad_w", std::move(g.grad_w)),
                ref_output("grad_b", std::move(g.grad_b))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor gx0 = make_output_like(grad_x0_init_);
        Tensor gxl = alias_ ? gx0 : make_output({s_.B, s_.N});
        Tensor gw = make_output({s_.N});
        Tensor gb = make_output({s_.N});
        kernels::vector_crossnet_backward(in(in_.x0), in(in_.xl), in(in_.w), in(s_saved_),
                                          in(grad_out_), gx0, gxl, gw, gb, stream());
        if (alias_) {
            return {gx0, gw, gb};
        }
        return {gx0, gxl, gw, gb};
    }

    // grad_x0: product + accumulate; grad_xl: gs (N terms), * w, + grad_out; grad_w: gs, then B
    // terms; grad_b: B terms.
    int64_t terms(size_t output) const override {
        if (alias_) {
            output = output == 0 ? 1 : output + 1;
        }
        switch (output) {
            case 0:
                return 2;
            case 1:
                return s_.N + 2 + (alias_ ? 2 : 0);
            case 2:
                return s_.N + s_.B + 1;
            default:
                return s_.B;
        }
    }

private:
    VectorShape s_;
    bool alias_;
    VectorInputs in_;
    Tensor s_saved_, grad_out_, grad_x0_init_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    const std::vector<VectorShape> shapes = {{1, 13, true, false},
                                             {3, 10, true, false},
                                             {17, 33, false, false},
                                             {2048, 3456, false, true}};
    for (const VectorShape& s : shapes) {
        cases.push_back(std::make_unique<VectorCrossNetForwardCase>(s));
        cases.push_back(std::make_unique<VectorCrossNetBackwardCase>(s, false));
        if (s.same_input) {
            cases.push_back(std::make_unique<VectorCrossNetBackwardCase>(s, true));
        }
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
