// The optimizer of the dense parameters (MLPs, cross layers, norms): SGD, Adagrad or Adam with
// torch.optim semantics (kernels/dense_optimizer.h), applied after the dense gradients are final
// (all-reduced under data parallelism). Embedding tables use the fused optimizers instead.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/stream.h"
#include "engine/modules/module.h"

namespace shardrec {

struct DenseOptimizerConfig {
    std::string type = "adagrad";           // sgd | adagrad | adam
    float learning_rate = 0.01f;            // the schedule's base; step() takes the scheduled value
    float eps = 1e-8f;                      // adagrad, adam
    float beta1 = 0.9f, beta2 = 0.999f;     // adam
    float weight_decay = 0.f;               // L2, added to the gradient (torch.optim)
    float initial_accumulator_value = 0.f;  // adagrad's initial state_sum
};

class DenseOptimizer {
public:
    virtual ~DenseOptimizer() = default;

    // One update of every parameter from its grad, at learning rate lr. The state is allocated
    // on the first call (or by init_state), one slot per parameter in this order; later calls
    // must pass the same parameters in the same order (checked by count, name and shape).
    void step(const std::vector<Parameter*>& params, float lr, Stream& stream = Stream::cpu());

    // Allocates the state for `params` if it is not there yet, without updating anything (so a
    // checkpoint can be loaded into state() before the first step).
    void init_state(const std::vector<Parameter*>& params);

    // The checkpointed state: ("step", i64 [1] count of steps taken) then, per parameter,
    // ("<name>.<state>", f32 like the parameter) with torch's state names: "sum" (adagrad),
    // "exp_avg" and "exp_avg_sq" (adam); SGD has none. Empty before init_state / the first step.
    std::vector<std::pair<std::string, Tensor*>> state();

    int64_t num_steps() const;  // steps taken (Adam's bias correction uses num_steps() + 1)

    const DenseOptimizerConfig& config() const { return config_; }

protected:
    explicit DenseOptimizer(DenseOptimizerConfig config) : config_(std::move(config)) {}

    // The per-parameter state names of this optimizer ({} for SGD, {"sum"} for Adagrad, ...).
    virtual std::vector<std::string> state_names() const = 0;

    virtual float initial_state_value(size_t /*state*/) const { return 0.f; }

    // Updates one parameter; slots are its states in state_names() order; step is 1-based.
    virtual void update(
        Parameter& param, std::vector<Tensor>& slots, float lr, int64_t step, Stream& stream) = 0;

    DenseOptimizerConfig config_;

private:
    struct Slot {
        std::string name;
        Shape shape;
        std::vector<Tensor> states;
    };

    std::vector<Slot> slots_;
    Tensor step_;  // i64 [1]
};

// type: sgd | adagrad | adam; throws on anything else or on an invalid hyperparameter.
std::unique_ptr<DenseOptimizer> make_dense_optimizer(const DenseOptimizerConfig& config);

}  // namespace shardrec
