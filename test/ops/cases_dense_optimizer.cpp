// Backend-ops cases of the dense optimizer updates (kernels/dense_optimizer.h): SGD, Adagrad and
// Adam, with and without weight decay, Adam at step 1 and a later step, odd sizes.
#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "kernels/dense_optimizer.h"
#include "test/ops/dense_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/dense_optimizer.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

enum class Optim { kSgd, kAdagrad, kAdam };

struct OptimCase {
    Optim optim;
    Shape shape;
    float weight_decay;
    int64_t step;        // Adam only
    bool bench = false;  // timed by bench_ops only
};

class DenseOptimizerCase : public OpCase {
public:
    explicit DenseOptimizerCase(OptimCase c) : c_(std::move(c)) {}

    OpKind kind() const override {
        switch (c_.optim) {
            case Optim::kSgd:
                return OpKind::kSgdUpdate;
            case Optim::kAdagrad:
                return OpKind::kAdagradUpdate;
            case Optim::kAdam:
                break;
        }
        return OpKind::kAdamUpdate;
    }

    std::string vars() const override {
        return fmt::format("shape={},wd={},step={}", shape_str(c_.shape), c_.weight_decay, c_.step);
    }

    void make_inputs(uint64_t seed) override {
        param_ = random_f32(c_.shape, seed, 1, -1.f, 1.f);
        grad_ = random_f32(c_.shape, seed, 2, -1.f, 1.f);
        state1_ = random_f32(c_.shape, seed, 3, c_.optim == Optim::kAdam ? -0.1f : 0.f, 0.5f);
        state2_ = random_f32(c_.shape, seed, 4, 0.f, 0.05f);
    }

    std::vector<RefOutput> reference() const override {
        const auto p = to_double(param_), g = to_double(grad_);
        switch (c_.optim) {
            case Optim::kSgd:
                return {ref_output("param", ref::sgd_update(p, g, kLr, c_.weight_decay))};
            case Optim::kAdagrad: {
                ref::AdagradResult r =
                    ref::adagrad_update(p, g, to_double(state1_), kLr, kEps, c_.weight_decay);
                return {ref_output("param", std::move(r.param)),
                        ref_output("state_sum", std::move(r.state_sum))};
            }
            case Optim::kAdam:
                break;
        }
        ref::AdamResult r = ref::adam_update(p, g, to_double(state1_), to_double(state2_), kLr,
                                             kBeta1, kBeta2, kEps, c_.weight_decay, c_.step);
        return {ref_output("param", std::move(r.param)),
                ref_output("exp_avg", std::move(r.exp_avg)),
                ref_output("exp_avg_sq", std::move(r.exp_avg_sq))};
    }

    // The update is in place. Test cases update guarded copies of the initial tensors; bench
    // cases update the inputs themselves (three 64 MiB copies per run would swamp the timing),
    // so only their first run after make_inputs is checked, as bench_ops does.
    std::vector<Tensor> run(Device /*device*/) override {
        const auto updated = [&](const Tensor& init) {
            return c_.bench ? in(init) : make_output_like(init);
        };
        Tensor p = updated(param_);
        Tensor s1 = c_.optim == Optim::kSgd ? Tensor() : updated(state1_);
        Tensor s2 = c_.optim == Optim::kAdam ? updated(state2_) : Tensor();
        switch (c_.optim) {
            case Optim::kSgd:
                kernels::sgd_update(p, in(grad_), kLr, c_.weight_decay, stream());
                return {p};
            case Optim::kAdagrad:
                kernels::adagrad_update(p, in(grad_), s1, kLr, kEps, c_.weight_decay, stream());
                return {p, s1};
            case Optim::kAdam:
                break;
        }
        kernels::AdamHyperParams hp;
        hp.lr = kLr, hp.beta1 = kBeta1, hp.beta2 = kBeta2, hp.eps = kEps;
        hp.weight_decay = c_.weight_decay, hp.step = c_.step;
        kernels::adam_update(p, in(grad_), s1, s2, hp, stream());
        return {p, s1, s2};
    }

    // Elementwise: at most 8 dependent roundings (decay, moments, sqrt, bias corrections).
    int64_t terms(size_t /*output*/) const override { return 8; }

    bool bench_only() const override { return c_.bench; }

    // Reads and writes param and each state, reads grad.
    double bytes() const override {
        const int states = c_.optim == Optim::kSgd ? 0 : (c_.optim == Optim::kAdagrad ? 1 : 2);
        return 4.0 * static_cast<double>(shape_numel(c_.shape)) * (3 + 2 * states);
    }

private:
    static constexpr float kLr = 0.05f;
    static constexpr float kEps = 1e-8f;
    static constexpr float kBeta1 = 0.9f;
    static constexpr float kBeta2 = 0.999f;
    OptimCase c_;
    Tensor param_, grad_, state1_, state2_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (Optim o : {Optim::kSgd, Optim::kAdagrad, Optim::kAdam}) {
        for (const Shape& shape : std::vector<Shape>{{1}, {7}, {33, 17}}) {
            for (float wd : {0.f, 0.01f}) {
                cases.push_back(std::make_unique<DenseOptimizerCase>(OptimCase{o, shape, wd, 1}));
            }
        }
    }
    cases.push_back(std::make_unique<DenseOptimizerCase>(OptimCase{Optim::kAdam, {13}, 0.f, 7}));
    // Bench: the MLPerf DLRM-DCNv2 model's 16 M dense parameters, one flat bucket.
    for (Optim o : {Optim::kSgd, Optim::kAdagrad, Optim::kAdam}) {
        cases.push_back(
            std::make_unique<DenseOptimizerCase>(OptimCase{o, {16000000}, 0.f, 7, true}));
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
