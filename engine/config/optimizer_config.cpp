// The optimizer section: the dense optimizer with its learning-rate schedule, and the fused
// sparse (embedding) optimizer.
#include <fmt/format.h>

#include "engine/config/config.h"

namespace shardrec {

void OptimizerConfig::Dense::visit(FieldVisitor& v) {
    // A rule's own settings are refused under another rule, which would ignore them.
    v.field(Field("type", "update rule").one_of({"sgd", "adagrad", "adam"}), type);
    const bool adam = type == "adam", adagrad = type == "adagrad";
    v.field(Field("learning_rate", "peak learning rate").greater_than(0), learning_rate);
    v.field(Field("eps", "added to the denominator")
                .greater_than(0)
                .only_if(adagrad || adam, "optimizer.dense.type is adagrad or adam"),
            eps);
    v.field(Field("beta1", "first-moment decay")
                .at_least(0)
                .less_than(1)
                .only_if(adam, "optimizer.dense.type is adam"),
            beta1);
    v.field(Field("beta2", "second-moment decay")
                .at_least(0)
                .less_than(1)
                .only_if(adam, "optimizer.dense.type is adam"),
            beta2);
    v.field(Field("weight_decay", "L2 penalty added to the gradient").at_least(0), weight_decay);
    v.field(Field("initial_accumulator_value", "starting value of adagrad's sum of squares")
                .at_least(0)
                .only_if(adagrad, "optimizer.dense.type is adagrad"),
            initial_accumulator_value);
    v.field(
        Field("warmup_steps", "steps of linear warmup up to learning_rate; 0: none").at_least(0),
        warmup_steps);
    v.field(Field("decay_start_step",
                  "step where the polynomial decay starts; >= warmup_steps when decaying")
                .at_least(0),
            decay_start_step);
    v.field(Field("decay_steps", "steps of polynomial decay; 0: no decay").at_least(0),
            decay_steps);
    v.field(Field("decay_power", "power of the polynomial decay").greater_than(0), decay_power);
    v.field(Field("end_lr_factor", "learning rate after the decay, as a fraction of the peak")
                .at_least(0)
                .at_most(1),
            end_lr_factor);
}

void OptimizerConfig::Dense::resolve(ConfigNode& node) {
    // Decay starting inside the warmup would make the two ramps overlap (MLPerf DLRM starts it
    // after the warmup).
    if (decay_steps > 0 && decay_start_step < warmup_steps) {
        node.error_at("decay_start_step",
                      fmt::format("must be >= warmup_steps ({}) when decay_steps > 0, got {}",
                                  warmup_steps, decay_start_step));
    }
}

void OptimizerConfig::Sparse::visit(FieldVisitor& v) {
    v.field(Field("type", "update rule applied to the touched rows in the backward")
                .one_of({"sgd", "adagrad", "rowwise_adagrad", "adam"}),
            type);
    const bool adam = type == "adam", adagrad = type == "adagrad" || type == "rowwise_adagrad";
    v.field(Field("learning_rate", "learning rate").greater_than(0), learning_rate);
    v.field(
        Field("eps", "added to the denominator")
            .greater_than(0)
            .only_if(adagrad || adam, "optimizer.sparse.type is adagrad, rowwise_adagrad or adam"),
        eps);
    v.field(Field("beta1", "first-moment decay")
                .at_least(0)
                .less_than(1)
                .only_if(adam, "optimizer.sparse.type is adam"),
            beta1);
    v.field(Field("beta2", "second-moment decay")
                .at_least(0)
                .less_than(1)
                .only_if(adam, "optimizer.sparse.type is adam"),
            beta2);
    v.field(Field("weight_decay", "L2 penalty added to the gradient").at_least(0), weight_decay);
    v.field(Field("initial_accumulator_value",
                  "starting value of the sum of squares (FBGEMM's momentum1, TorchRec's "
                  "initial_accumulator_value)")
                .at_least(0)
                .only_if(adagrad, "optimizer.sparse.type is adagrad or rowwise_adagrad"),
            initial_accumulator_value);
}

void OptimizerConfig::visit(FieldVisitor& v) {
    v.section(
        Field("dense", "optimizer of the MLPs and cross layers"),
        [this](FieldVisitor& s) { dense.visit(s); }, [this](ConfigNode& n) { dense.resolve(n); });
    v.section(Field("sparse", "fused optimizer of the embedding tables"),
              [this](FieldVisitor& s) { sparse.visit(s); });
}

void OptimizerConfig::from_yaml(ConfigNode& node) {
    read_fields(node, [this](FieldVisitor& v) { visit(v); });
}

YAML::Node OptimizerConfig::to_yaml() const {
    OptimizerConfig copy = *this;
    return write_fields([&copy](FieldVisitor& v) { copy.visit(v); });
}

}  // namespace shardrec
