#include "engine/optim/dense_optimizer.h"

#include <cmath>

#include "kernels/dense_optimizer.h"

namespace shardrec {
namespace {

class Sgd : public DenseOptimizer {
public:
    explicit Sgd(const DenseOptimizerConfig& c) : DenseOptimizer(c) {}

protected:
    std::vector<std::string> state_names() const override { return {}; }

    void update(Parameter& p,
                std::vector<Tensor>& /*slots*/,
                float lr,
                int64_t /*step*/,
                Stream& stream) override {
        kernels::sgd_update(p.value, p.grad, lr, config_.weight_decay, stream);
    }
};

class Adagrad : public DenseOptimizer {
public:
    explicit Adagrad(const DenseOptimizerConfig& c) : DenseOptimizer(c) {}

protected:
    std::vector<std::string> state_names() const override { return {"sum"}; }

    float initial_state_value(size_t /*state*/) const override {
        return config_.initial_accumulator_value;
    }

    void update(Parameter& p,
                std::vector<Tensor>& slots,
                float lr,
                int64_t /*step*/,
                Stream& stream) override {
        kernels::adagrad_update(p.value, p.grad, slots[0], lr, config_.eps, config_.weight_decay,
                                stream);
    }
};

class Adam : public DenseOptimizer {
public:
    explicit Adam(const DenseOptimizerConfig& c) : DenseOptimizer(c) {}

protected:
    std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

    void update(
        Parameter& p, std::vector<Tensor>& slots, float lr, int64_t step, Stream& stream) override {
        kernels::AdamHyperParams hp;
        hp.lr = lr;
        hp.beta1 = config_.beta1;
        hp.beta2 = config_.beta2;
        hp.eps = config_.eps;
        hp.weight_decay = config_.weight_decay;
        hp.step = step;
        kernels::adam_update(p.value, p.grad, slots[0], slots[1], hp, stream);
    }
};

}  // namespace

void DenseOptimizer::init_state(const std::vector<Parameter*>& params) {
    if (step_.defined()) {
        return;
    }
    step_ = Tensor::zeros({1}, DType::kI64);
    const std::vector<std::string> names = state_names();
    for (size_t s = 0; s < names.size(); ++s) {
        SR_CHECK(!names[s].empty(), "empty state name");
    }
    slots_.reserve(params.size());
    for (const Parameter* p : params) {
        Slot slot{p->name, p->value.shape(), {}};
        for (size_t s = 0; s < names.size(); ++s) {
            Tensor t = Tensor::empty(p->value.shape(), DType::kF32, p->value.device());
            const float v = initial_state_value(s);
            if (v == 0.f) {
                t.zero_();
            } else {
                Tensor host = Tensor::empty(p->value.shape(), DType::kF32);
                for (int64_t i = 0; i < host.numel(); ++i) {
                    host.data<float>()[i] = v;
                }
                t.copy_from(host);
            }
            slot.states.push_back(t);
        }
        slots_.push_back(std::move(slot));
    }
}

void DenseOptimizer::step(const std::vector<Parameter*>& params, float lr, Stream& stream) {
    init_state(params);
    SR_CHECK(params.size() == slots_.size(),
             "dense optimizer: {} parameters, but the state was built for {}", params.size(),
             slots_.size());
    const int64_t step = step_.data<int64_t>()[0] + 1;
    for (size_t i = 0; i < params.size(); ++i) {
        Parameter& p = *params[i];
        SR_CHECK(p.name == slots_[i].name && p.value.shape() == slots_[i].shape,
                 "dense optimizer: parameter {} is {} {}, the state has {} {}", i, p.name,
                 p.value.str(), slots_[i].name, shape_str(slots_[i].shape));
        update(p, slots_[i].states, lr, step, stream);
    }
    step_.data<int64_t>()[0] = step;
}

std::vector<std::pair<std::string, Tensor*>> DenseOptimizer::state() {
    std::vector<std::pair<std::string, Tensor*>> out;
    if (!step_.defined()) {
        return out;
    }
    out.emplace_back("step", &step_);
    const std::vector<std::string> names = state_names();
    for (Slot& slot : slots_) {
        for (size_t s = 0; s < names.size(); ++s) {
            out.emplace_back(slot.name + "." + names[s], &slot.states[s]);
        }
    }
    return out;
}

int64_t DenseOptimizer::num_steps() const {
    return step_.defined() ? step_.data<int64_t>()[0] : 0;
}

std::unique_ptr<DenseOptimizer> make_dense_optimizer(const DenseOptimizerConfig& c) {
    SR_CHECK(std::isfinite(c.learning_rate) && c.learning_rate >= 0.f,
             "dense optimizer: learning_rate must be >= 0, got {}", c.learning_rate);
    SR_CHECK(c.weight_decay >= 0.f, "dense optimizer: weight_decay must be >= 0, got {}",
             c.weight_decay);
    if (c.type == "sgd") {
        return std::make_unique<Sgd>(c);
    }
    SR_CHECK(c.eps > 0.f, "dense optimizer: eps must be > 0, got {}", c.eps);
    if (c.type == "adagrad") {
        SR_CHECK(c.initial_accumulator_value >= 0.f,
                 "dense optimizer: initial_accumulator_value must be >= 0, got {}",
                 c.initial_accumulator_value);
        return std::make_unique<Adagrad>(c);
    }
    if (c.type == "adam") {
        SR_CHECK(c.beta1 >= 0.f && c.beta1 < 1.f && c.beta2 >= 0.f && c.beta2 < 1.f,
                 "dense optimizer: adam betas must be in [0, 1), got {} {}", c.beta1, c.beta2);
        return std::make_unique<Adam>(c);
    }
    SR_CHECK(false, "dense optimizer: unknown type '{}' (sgd, adagrad or adam)", c.type);
    return nullptr;
}

}  // namespace shardrec
