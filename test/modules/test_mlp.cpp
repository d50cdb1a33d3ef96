// Perceptron and MLP: shapes and TorchRec names, gradients against finite differences of the
// float64 reference forward, deterministic name-keyed initialisation, buffer reuse, BLAS thread
// independence, and a small fit with SGD.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "engine/modules/mlp.h"
#include "kernels/bce_with_logits.h"
#include "kernels/dense_optimizer.h"
#include "test/modules/dense_gradcheck.h"
#include "test/reference/linear.h"

using namespace shardrec;
using namespace shardrec::test;
using kernels::Activation;

namespace {

ref::Act to_ref(Activation act) {
    if (act == Activation::kRelu) {
        return ref::Act::kRelu;
    }
    if (act == Activation::kSigmoid) {
        return ref::Act::kSigmoid;
    }
    return ref::Act::kIdentity;
}

// The MLP forward in float64: params alternate weight, bias per layer.
RefForward mlp_reference(int64_t B, int64_t in, const std::vector<int64_t>& sizes, Activation a) {
    return [=](const std::vector<double>& x, const std::vector<std::vector<double>>& p) {
        std::vector<double> h = x;
        int64_t width = in;
        for (size_t l = 0; l < sizes.size(); ++l) {
            h = ref::linear_forward(h, p[2 * l], p[2 * l + 1], B, width, sizes[l], to_ref(a)).value;
            width = sizes[l];
        }
        return h;
    };
}

}  // namespace

TEST_CASE("MLP: B=3, in 40, layers [16, 8, 4] gives [3, 4] with TorchRec names", "[modules]") {
    MLP mlp("dense_arch.model", 40, {16, 8, 4}, Activation::kRelu, 7);
    const Tensor& y = mlp.forward(random_input({3, 40}, 1));
    CHECK(y.shape() == Shape{3, 4});
    CHECK(mlp.out_features() == 4);
    const std::vector<Parameter*> params = mlp.parameters();
    REQUIRE(params.size() == 6);
    CHECK(params[0]->name == "dense_arch.model._mlp.0._linear.weight");
    CHECK(params[0]->value.shape() == Shape{16, 40});
    CHECK(params[5]->name == "dense_arch.model._mlp.2._linear.bias");
    CHECK(params[5]->value.shape() == Shape{4});
    for (int64_t i = 0; i < y.numel(); ++i) {
        CHECK(y.data<float>()[i] >= 0.f);  // relu last too
    }
}

TEST_CASE("Perceptron: gradients match finite differences for every activation", "[modules]") {
    for (Activation act : {Activation::kIdentity, Activation::kRelu, Activation::kSigmoid}) {
        INFO("activation " << kernels::activation_name(act));
        Perceptron p("p", 5, 4, act, 3);
        check_module_gradients(p, random_input({3, 5}, 2), mlp_reference(3, 5, {4}, act));
    }
}

TEST_CASE("MLP: gradients match finite differences through three layers", "[modules]") {
    MLP mlp("mlp", 6, {5, 4, 3}, Activation::kRelu, 11);
    check_module_gradients(mlp, random_input({3, 6}, 3),
                           mlp_reference(3, 6, {5, 4, 3}, Activation::kRelu));
}

TEST_CASE("MLP: initialisation depends on (seed, name) only, within nn.Linear's bound",
          "[modules]") {
    MLP a("top", 9, {4}, Activation::kRelu, 5);
    MLP other_first("unrelated", 3, {2}, Activation::kRelu, 5);
    MLP b("top", 9, {4}, Activation::kRelu, 5);  // built after another module
    MLP c("top", 9, {4}, Activation::kRelu, 6);
    const auto wa = a.parameters()[0]->value.to_vector<float>();
    CHECK(wa == b.parameters()[0]->value.to_vector<float>());
    CHECK(wa != c.parameters()[0]->value.to_vector<float>());
    CHECK(wa != a.parameters()[1]->value.to_vector<float>());  // weight and bias differ
    const float bound = 1.0f / 3.0f;
    float largest = 0.f;
    for (float w : wa) {
        largest = std::max(largest, std::fabs(w));
    }
    CHECK(largest <= bound);
    CHECK(largest > 0.5f * bound);
}

TEST_CASE("MLP: a steady batch shape allocates nothing after the first step", "[modules]") {
    MLP mlp("mlp", 13, {8, 4}, Activation::kRelu, 1);
    check_steady_state_allocates_nothing(mlp, random_input({17, 13}, 4));
}

// CMakeLists.txt links OpenBLAS's OpenMP build, whose GEMMs run on the OpenMP threads of the other
// kernels; the pthreads build (the Debian default) would keep a competing pool of its own.
TEST_CASE("linear: OpenBLAS runs its GEMMs on the OpenMP threads", "[modules][blas]") {
    CHECK(std::string(kernels::blas_threading()) == "OpenMP");
}

// OpenBLAS is bitwise repeatable at a fixed thread count but not across counts (kernels/linear.h):
// the same count twice must give the same bits, and 1 vs 2 threads must agree to rounding.
TEST_CASE("linear: bitwise repeatable per BLAS thread count, close across counts",
          "[modules][blas]") {
    const int saved = kernels::blas_num_threads();
    const Tensor x = random_input({512, 384}, 5), grad = random_input({512, 256}, 6);
    auto run = [&](int threads) {
        kernels::set_blas_num_threads(threads);
        MLP mlp("mlp", 384, {256}, Activation::kRelu, 2);
        std::vector<float> out = mlp.forward(x).to_vector<float>();
        const std::vector<float> gx = mlp.backward(grad).to_vector<float>();
        const std::vector<float> gw = mlp.parameters()[0]->grad.to_vector<float>();
        out.insert(out.end(), gx.begin(), gx.end());
        out.insert(out.end(), gw.begin(), gw.end());
        return out;
    };
    const std::vector<float> two = run(2), two_again = run(2), one = run(1);
    kernels::set_blas_num_threads(saved);
    REQUIRE(one.size() == two.size());
    CHECK(std::memcmp(two.data(), two_again.data(), two.size() * sizeof(float)) == 0);
    double worst = 0;
    for (size_t i = 0; i < one.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(one[i]) - two[i]) /
                                    std::max(1.0, std::fabs(static_cast<double>(two[i]))));
    }
    CHECK(worst < 1e-5);
}

TEST_CASE("MLP: learns a nonlinear decision boundary with SGD", "[modules][regression]") {
    // Label = [x0 * x1 > 0] on 256 fixed points: not linearly separable.
    const int64_t B = 256;
    const Tensor x = random_input({B, 2}, 7);
    Tensor labels = Tensor::empty({B}, DType::kF32);
    for (int64_t b = 0; b < B; ++b) {
        labels.data<float>()[b] =
            x.data<float>()[2 * b] * x.data<float>()[2 * b + 1] > 0 ? 1.f : 0.f;
    }
    MLP hidden("mlp", 2, {32, 32}, Activation::kRelu, 3);
    Perceptron out("out", 32, 1, Activation::kIdentity, 3);
    Tensor loss = Tensor::empty({1}, DType::kF32), grad = Tensor::empty({B, 1}, DType::kF32);
    float first_loss = 0.f;
    for (int step = 0; step < 400; ++step) {
        const Tensor& logits = out.forward(hidden.forward(x));
        kernels::bce_with_logits(logits, labels, loss, grad, Stream::cpu());
        if (step == 0) {
            first_loss = loss.data<float>()[0];
        }
        hidden.backward(out.backward(grad));
        for (Module* m : {static_cast<Module*>(&hidden), static_cast<Module*>(&out)}) {
            for (Parameter* p : m->parameters()) {
                kernels::sgd_update(p->value, p->grad, 0.5f, 0.f, Stream::cpu());
            }
        }
    }
    const Tensor& logits = out.forward(hidden.forward(x));
    int correct = 0;
    for (int64_t b = 0; b < B; ++b) {
        correct += (logits.data<float>()[b] > 0) == (labels.data<float>()[b] > 0.5f) ? 1 : 0;
    }
    INFO("first loss " << first_loss << ", last loss " << loss.data<float>()[0]);
    CHECK(loss.data<float>()[0] < 0.25f * first_loss);
    CHECK(correct >= 0.95 * B);
}
