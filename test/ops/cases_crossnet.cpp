// Backend-ops cases of one cross layer (kernels/crossnet.h), full rank and low rank, forward and
// backward, at odd sizes, with x0 and xl the same tensor (layer 0) or distinct, plus the MLPerf
// DLRM-DCN layer (N = 3456, r = 512) as bench-only cases at B = 2048 and at the CPU step's batch of
// 256 (bench/baselines/compare_cpu.sh), the shapes the step itself multiplies.
#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/crossnet.h"
#include "test/ops/dense_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/crossnet.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

struct CrossShape {
    int64_t B, N, r;  // r = 0: full rank
    bool same_input;  // x0 and xl are one tensor (the first layer)
    bool bench;

    std::string vars() const {
        return fmt::format("B={},N={},r={},x0_is_xl={}", B, N, r == 0 ? "full" : std::to_string(r),
                           same_input ? 1 : 0);
    }

    Shape w_shape() const { return r == 0 ? Shape{N, N} : Shape{N, r}; }
};

// Inputs shared by the forward and backward cases.
struct CrossInputs {
    Tensor x0, xl, w, v, bias;

    void make(const CrossShape& s, uint64_t seed) {
        x0 = random_f32({s.B, s.N}, seed, 1);
        xl = s.same_input ? x0 : random_f32({s.B, s.N}, seed, 2);
        w = random_f32(s.w_shape(), seed, 3);
        v = s.r > 0 ? random_f32({s.r, s.N}, seed, 4) : Tensor();
        bias = random_f32({s.N}, seed, 5);
    }

    const Tensor* v_ptr() const { return v.defined() ? &v : nullptr; }

    std::vector<double> v_values() const {
        return v.defined() ? to_double(v) : std::vector<double>{};
    }
};

class CrossNetForwardCase : public OpCase {
public:
    explicit CrossNetForwardCase(CrossShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kCrossNetForward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override { in_.make(s_, seed); }

    std::vector<RefOutput> reference() const override {
        ref::CrossNetForward f =
            ref::crossnet_forward(to_double(in_.x0), to_double(in_.xl), to_double(in_.w),
                                  in_.v_values(), to_double(in_.bias), s_.B, s_.N, s_.r);
        std::vector<RefOutput> out{ref_output("out", std::move(f.out)),
                                   ref_output("u", std::move(f.u))};
        if (s_.r > 0) {
            out.push_back(ref_output("vx", std::move(f.vx)));
        }
        return out;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor out = make_output({s_.B, s_.N});
        Tensor u = make_output({s_.B, s_.N});
        Tensor vx = s_.r > 0 ? make_output({s_.B, s_.r}) : Tensor();
        kernels::crossnet_forward(in(in_.x0), in(in_.xl), in(in_.w), in(in_.v_ptr()), in(in_.bias),
                                  out, u, s_.r > 0 ? &vx : nullptr, stream());
        if (s_.r > 0) {
            return {out, u, vx};
        }
        return {out, u};
    }

    // vx: N products; u: + r products (low rank) and the bias; out: * x0, + xl.
    int64_t terms(size_t output) const override {
        if (output == 2) {
            return s_.N;
        }
        return s_.N + s_.r + 1 + (output == 0 ? 2 : 0);
    }

    double flops() const override {
        const auto b = static_cast<double>(s_.B), n = static_cast<double>(s_.N);
        return s_.r == 0 ? 2 * b * n * n : 4 * b * n * static_cast<double>(s_.r);
    }

    std::vector<Gemm> gemms() const override {
        if (s_.r == 0) {
            return {{s_.B, s_.N, s_.N}};
        }
        return {{s_.B, s_.r, s_.N}, {s_.B, s_.N, s_.r}};
    }

private:
    CrossShape s_;
    CrossInputs in_;
};

// With alias, grad_xl is the grad_x0 tensor (as the module passes it at layer 0) and the one
// output holds grad_x0 + grad_xl.
class CrossNetBackwardCase : public OpCase {
public:
    CrossNetBackwardCase(CrossShape s, bool alias) : s_(s), alias_(alias) {}

    OpKind kind() const override { return OpKind::kCrossNetBackward; }

    std::string vars() const override { return s_.vars() + (alias_ ? ",grad_xl=grad_x0" : ""); }

    bool bench_only() const override { return s_.bench; }

    // u, vx are saved-forward values: any f32 data of the right shape.
    void make_inputs(uint64_t seed) override {
        in_.make(s_, seed);
        u_ = random_f32({s_.B, s_.N}, seed, 6);
        vx_ = s_.r > 0 ? random_f32({s_.B, s_.r}, seed, 7) : Tensor();
        grad_out_ = random_f32({s_.B, s_.N}, seed, 8);
        grad_x0_init_ = random_f32({s_.B, s_.N}, seed, 9);
    }

    std::vector<RefOutput> reference() const override {
        ref::CrossNetGrads g = ref::crossnet_backward(
            to_double(in_.x0), to_double(in_.xl), to_double(in_.w), in_.v_values(), to_double(u_),
            s_.r > 0 ? to_double(vx_) : std::vector<double>{}, to_double(grad_out_),
            to_double(grad_x0_init_), s_.B, s_.N, s_.r);
        std::vector<RefOutput> out;
        if (alias_) {
            out.push_back(ref_output("grad_x0+grad_xl", ref::add(g.grad_x0, g.grad_xl)));
        } else {
            out.push_back(ref_output("grad_x0", std::move(g.grad_x0)));
            out.push_back(ref_output("grad_xl", std::move(g.grad_xl)));
        }
        out.push_back(ref_output("grad_w", std::move(g.grad_w)));
        out.push_back(ref_output("grad_b", std::move(g.grad_b)));
        if (s_.r > 0) {
            out.push_back(ref_output("grad_v", std::move(g.grad_v)));
        }
        return out;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor gx0 = make_output_like(grad_x0_init_);
        Tensor gxl = alias_ ? gx0 : make_output({s_.B, s_.N});
        Tensor gw = make_output(s_.w_shape());
        Tensor gb = make_output({s_.N});
        Tensor gv = s_.r > 0 ? make_output({s_.r, s_.N}) : Tensor();
        kernels::crossnet_backward(in(in_.x0), in(in_.xl), in(in_.w), in(in_.v_ptr()), in(u_),
                                   s_.r > 0 ? &in(vx_) : nullptr, in(grad_out_), gx0, gxl, gw,
                                   s_.r > 0 ? &gv : nullptr, gb, stream());
        std::vector<Tensor> out{gx0};
        if (!alias_) {
            out.push_back(gxl);
        }
        out.push_back(gw);
        out.push_back(gb);
        if (s_.r > 0) {
            out.push_back(gv);
        }
        return out;
    }

    // grad_x0: one product and the accumulate; grad_xl: gu, then N (+ r) products, + grad_out;
    // grad_w, grad_b: gu, then B terms; grad_v: gv (N terms), then B terms.
    // With alias the first output takes both chains plus the final add.
    int64_t terms(size_t output) const override {
        if (alias_) {
            output = output == 0 ? 1 : output + 1;
        }
        switch (output) {
            case 0:
                return 2;
            case 1:
                return s_.N + s_.r + 3 + (alias_ ? 2 : 0);
            case 4:
                return s_.B + s_.N + 2;
            default:
                return s_.B + 2;
        }
    }

    double flops() const override {
        const auto b = static_cast<double>(s_.B), n = static_cast<double>(s_.N);
        return s_.r == 0 ? 4 * b * n * n : 8 * b * n * static_cast<double>(s_.r);
    }

    std::vector<Gemm> gemms() const override {
        if (s_.r == 0) {
            return {{s_.N, s_.N, s_.B}, {s_.B, s_.N, s_.N}};
        }
        return {{s_.B, s_.r, s_.N}, {s_.N, s_.r, s_.B}, {s_.r, s_.N, s_.B}, {s_.B, s_.N, s_.r}};
    }

private:
    CrossShape s_;
    bool alias_;
    CrossInputs in_;
    Tensor u_, vx_, grad_out_, grad_x0_init_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    const std::vector<CrossShape> shapes = {
        {1, 13, 0, true, false},        {3, 10, 0, true, false},      {17, 33, 0, false, false},
        {3, 10, 1, true, false},        {17, 33, 4, false, false},    {5, 13, 3, false, false},
        {2048, 3456, 512, false, true}, {256, 3456, 512, false, true}};
    for (const CrossShape& s : shapes) {
        cases.push_back(std::make_unique<CrossNetForwardCase>(s));
        cases.push_back(std::make_unique<CrossNetBackwardCase>(s, false));
        if (s.same_input) {
            cases.push_back(std::make_unique<CrossNetBackwardCase>(s, true));
        }
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
