// DenseOptimizer: each type against the float64 reference rules over several steps (Adam's bias
// correction counts steps), hand values, the checkpointed state's names, and misuse.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/allocator.h"
#include "engine/core/rng.h"
#include "engine/optim/dense_optimizer.h"
#include "test/reference/dense_optimizer.h"
#include "test/reference/finite_difference.h"
#include "test/support/compare.h"

using namespace shardrec;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t stream) {
    rng::Rng r(test::test_seed(), stream);
    Tensor t = Tensor::empty(shape, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) {
        t.data<float>()[i] = r.uniform(-1.f, 1.f);
    }
    return t;
}

std::vector<double> as_double(const Tensor& t) {
    const std::vector<float> v = t.to_vector<float>();
    return {v.begin(), v.end()};
}

struct TwoParams {
    Parameter a{"layer.weight", random_tensor({3, 4}, 1)};
    Parameter b{"layer.bias", random_tensor({3}, 2)};

    std::vector<Parameter*> list() { return {&a, &b}; }
};

}  // namespace

TEST_CASE("DenseOptimizer: each type follows the torch.optim rule over three steps", "[optim]") {
    for (const char* type : {"sgd", "adagrad", "adam"}) {
        INFO(type << ", seed " << test::test_seed());
        DenseOptimizerConfig c;
        c.type = type;
        c.weight_decay = 0.01f;
        c.initial_accumulator_value = 0.1f;
        std::unique_ptr<DenseOptimizer> opt = make_dense_optimizer(c);
        TwoParams p;
        std::vector<double> want = as_double(p.a.value);
        std::vector<double> s1(want.size(), std::string(type) == "adagrad" ? 0.1 : 0.0);
        std::vector<double> s2(want.size(), 0.0);
        const float lrs[] = {0.1f, 0.05f, 0.2f};
        for (int step = 0; step < 3; ++step) {
            p.a.grad.copy_from(random_tensor({3, 4}, 10 + step));
            p.b.grad.copy_from(random_tensor({3}, 20 + step));
            const std::vector<double> g = as_double(p.a.grad);
            opt->step(p.list(), lrs[step]);
            if (std::string(type) == "sgd") {
                want = ref::sgd_update(want, g, lrs[step], c.weight_decay).value;
            } else if (std::string(type) == "adagrad") {
                const auto r = ref::adagrad_update(want, g, s1, lrs[step], c.eps, c.weight_decay);
                want = r.param.value;
                s1 = r.state_sum.value;
            } else {
                const auto r = ref::adam_update(want, g, s1, s2, lrs[step], c.beta1, c.beta2, c.eps,
                                                c.weight_decay, step + 1);
                want = r.param.value;
                s1 = r.exp_avg.value;
                s2 = r.exp_avg_sq.value;
            }
        }
        CHECK(opt->num_steps() == 3);
        CHECK_RELATIVE(as_double(p.a.value), want, 1e-6);
    }
}

TEST_CASE("DenseOptimizer: hand values of one step", "[optim]") {
    Parameter p("w", Tensor::from_vector<float>({1.0f}));
    p.grad.data<float>()[0] = 0.5f;
    DenseOptimizerConfig c;
    c.type = "adagrad";  // s = 0.25, w = 1 - 0.1 * 0.5 / (0.5 + 1e-8)
    make_dense_optimizer(c)->step({&p}, 0.1f);
    CHECK(std::fabs(p.value.data<float>()[0] - 0.9f) < 1e-7);
    c.type = "adam";  // step 1: w = 1 - lr * g / (|g| + eps)
    p.value.data<float>()[0] = 1.0f;
    make_dense_optimizer(c)->step({&p}, 0.01f);
    CHECK(std::fabs(p.value.data<float>()[0] - 0.99f) < 1e-7);
}

TEST_CASE("DenseOptimizer: state names, one allocation, checkpoint round trip", "[optim]") {
    DenseOptimizerConfig c;
    c.type = "adam";
    std::unique_ptr<DenseOptimizer> opt = make_dense_optimizer(c);
    TwoParams p;
    CHECK(opt->state().empty());
    opt->step(p.list(), 0.01f);
    const auto state = opt->state();
    REQUIRE(state.size() == 5);
    CHECK(state[0].first == "step");
    CHECK(state[0].second->data<int64_t>()[0] == 1);
    CHECK(state[1].first == "layer.weight.exp_avg");
    CHECK(state[2].first == "layer.weight.exp_avg_sq");
    CHECK(state[4].first == "layer.bias.exp_avg_sq");
    CHECK(state[4].second->shape() == Shape{3});
    const int64_t allocs = alloc_stats(DeviceType::kCpu).num_allocs;
    opt->step(p.list(), 0.01f);
    CHECK(alloc_stats(DeviceType::kCpu).num_allocs == allocs);
    // Copy the state into a fresh optimizer: both then take the same next step.
    std::unique_ptr<DenseOptimizer> restored = make_dense_optimizer(c);
    TwoParams q;
    q.a.value.copy_from(p.a.value);
    q.b.value.copy_from(p.b.value);
    restored->init_state(q.list());
    const auto dst = restored->state();
    REQUIRE(dst.size() == state.size());
    for (size_t i = 0; i < dst.size(); ++i) {
        dst[i].second->copy_from(*opt->state()[i].second);
    }
    for (TwoParams* t : {&p, &q}) {
        t->a.grad.copy_from(random_tensor({3, 4}, 30));
    }
    opt->step(p.list(), 0.01f);
    restored->step(q.list(), 0.01f);
    CHECK(p.a.value.to_vector<float>() == q.a.value.to_vector<float>());
    CHECK(restored->num_steps() == 3);
}

TEST_CASE("DenseOptimizer: misuse throws", "[optim]") {
    DenseOptimizerConfig c;
    c.type = "lamb";
    CHECK_THROWS_AS(make_dense_optimizer(c), Error);
    c.type = "adam";
    c.beta1 = 1.0f;
    CHECK_THROWS_AS(make_dense_optimizer(c), Error);
    c.beta1 = 0.9f;
    std::unique_ptr<DenseOptimizer> opt = make_dense_optimizer(c);
    TwoParams p;
    opt->step(p.list(), 0.01f);
    CHECK_THROWS_AS(opt->step({&p.a}, 0.01f), Error);        // fewer parameters
    CHECK_THROWS_AS(opt->step({&p.b, &p.a}, 0.01f), Error);  // another order
}
