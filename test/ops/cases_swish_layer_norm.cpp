// Backend-ops cases of SwishLayerNorm (kernels/swish_layer_norm.h), forward and backward, at odd
// sizes, with a large common offset (the variance must not cancel) and non-trivial gamma/beta.
#include <cmath>

#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/swish_layer_norm.h"
#include "test/ops/dense_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/swish_layer_norm.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

struct LayerNormShape {
    int64_t R, N;
    float offset;  // added to every x: a large common mean
    bool bench;

    std::string vars() const { return fmt::format("R={},N={},offset={}", R, N, offset); }
};

struct LayerNormInputs {
    Tensor x, gamma, beta;

    void make(const LayerNormShape& s, uint64_t seed) {
        x = random_f32({s.R, s.N}, seed, 1, s.offset - 2.f, s.offset + 2.f);
        gamma = random_f32({s.N}, seed, 2, 0.5f, 1.5f);
        beta = random_f32({s.N}, seed, 3, -0.5f, 0.5f);
    }
};

class SwishLayerNormForwardCase : public OpCase {
public:
    explicit SwishLayerNormForwardCase(LayerNormShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kSwishLayerNormForward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    void make_inputs(uint64_t seed) override { in_.make(s_, seed); }

    std::vector<RefOutput> reference() const override {
        ref::SwishLayerNormForward f =
            ref::swish_layer_norm_forward(to_double(in_.x), to_double(in_.gamma),
                                          to_double(in_.beta), kernels::kLayerNormEps, s_.R, s_.N);
        return {ref_output("y", std::move(f.y)), ref_output("mean", std::move(f.mean)),
                ref_output("rstd", std::move(f.rstd))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor y = make_output({s_.R, s_.N});
        Tensor mean = make_output({s_.R});
        Tensor rstd = make_output({s_.R});
        kernels::swish_layer_norm_forward(in(in_.x), in(in_.gamma), in(in_.beta),
                                          kernels::kLayerNormEps, y, mean, rstd, stream());
        return {y, mean, rstd};
    }

    // mean: N adds and a divide; rstd: + N squares, divide, eps, sqrt, reciprocal; y: + xhat,
    // gamma/beta, exp, add, divide, times x.
    int64_t terms(size_t output) const override {
        return output == 1 ? s_.N + 1 : (output == 2 ? 2 * s_.N + 5 : 2 * s_.N + 12);
    }

    // Reads x, gamma, beta; writes y, mean, rstd.
    double bytes() const override {
        return 4.0 * static_cast<double>(2 * s_.R * s_.N + 2 * s_.N + 2 * s_.R);
    }

private:
    LayerNormShape s_;
    LayerNormInputs in_;
};

class SwishLayerNormBackwardCase : public OpCase {
public:
    explicit SwishLayerNormBackwardCase(LayerNormShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kSwishLayerNormBackward; }

    std::string vars() const override { return s_.vars(); }

    bool bench_only() const override { return s_.bench; }

    // mean and rstd are the row statistics of x, rounded to f32 as forward saves them.
    void make_inputs(uint64_t seed) override {
        in_.make(s_, seed);
        grad_y_ = random_f32({s_.R, s_.N}, seed, 4, -1.f, 1.f);
        const ref::SwishLayerNormForward f =
            ref::swish_layer_norm_forward(to_double(in_.x), to_double(in_.gamma),
                                          to_double(in_.beta), kernels::kLayerNormEps, s_.R, s_.N);
        std::vector<float> mean(f.mean.value.begin(), f.mean.value.end());
        std::vector<float> rstd(f.rstd.value.begin(), f.rstd.value.end());
        mean_ = Tensor::from_vector(mean);
        rstd_ = Tensor::from_vector(rstd);
    }

    std::vector<RefOutput> reference() const override {
        ref::SwishLayerNormGrads g = ref::swish_layer_norm_backward(
            to_double(in_.x), to_double(in_.gamma), to_double(in_.beta), to_double(mean_),
            to_double(rstd_), to_double(grad_y_), s_.R, s_.N);
        return {ref_output("grad_x", std::move(g.grad_x)),
                ref_output("grad_gamma", std::move(g.grad_gamma)),
                ref_output("grad_beta", std::move(g.grad_beta))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor gx = make_output({s_.R, s_.N});
        Tensor gg = make_output({s_.N});
        Tensor gb = make_output({s_.N});
        kernels::swish_layer_norm_backward(in(in_.x), in(in_.gamma), in(in_.beta), in(mean_),
                                           in(rstd_), in(grad_y_), gx, gg, gb, stream());
        return {gx, gg, gb};
    }

    // Recomputing xhat and the sigmoid and forming d y / d z costs about 14 roundings; grad_x
    // adds the N-term row sums and the final combination, grad_gamma/beta the R-row sums.
    int64_t terms(size_t output) const override { return output == 0 ? s_.N + 20 : s_.R + 16; }

private:
    LayerNormShape s_;
    LayerNormInputs in_;
    Tensor grad_y_, mean_, rstd_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    const std::vector<LayerNormShape> shapes = {{1, 13, 0.f, false},  {3, 10, 0.f, false},
                                                {17, 33, 0.f, false}, {5, 64, 100.f, false},
                                                {4, 256, 0.f, false}, {2048, 1024, 0.f, true}};
    for (const LayerNormShape& s : shapes) {
        cases.push_back(std::make_unique<SwishLayerNormForwardCase>(s));
        cases.push_back(std::make_unique<SwishLayerNormBackwardCase>(s));
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
