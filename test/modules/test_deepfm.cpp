// DeepFM and FactorizationMachine on TorchRec's example: embeddings [B, 2, 64] and [B, 2, 32]
// give 192 features; DeepFM with Linear(192, 30) gives [B, 30] and FM gives [B, 1]. Gradients
// against the reference, and the split of the input gradient back to the embeddings.
#include <catch2/catch.hpp>

#include "engine/modules/deepfm.h"
#include "engine/modules/mlp.h"
#include "test/modules/dense_gradcheck.h"
#include "test/reference/factorization_machine.h"
#include "test/reference/linear.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using kernels::Activation;

TEST_CASE("DeepFM: [B,2,64] and [B,2,32] through Linear(192, 30) give [B, 30]", "[modules]") {
    const int64_t B = 3;
    DeepFM deepfm(std::make_unique<Perceptron>("dense_module", 192, 30, Activation::kIdentity, 1));
    const std::vector<Tensor> emb = {random_input({B, 2, 64}, 1), random_input({B, 2, 32}, 2)};
    const Tensor y = deepfm.forward(emb).clone();
    CHECK(y.shape() == Shape{B, 30});
    CHECK(deepfm.parameters()[0]->name == "dense_module._linear.weight");
    // The same as the dense module on the explicit concatenation.
    std::vector<double> cat;
    for (int64_t b = 0; b < B; ++b) {
        for (const Tensor& e : emb) {
            const std::vector<double> v = as_double(e);
            const int64_t w = e.numel() / B;
            cat.insert(cat.end(), v.begin() + b * w, v.begin() + (b + 1) * w);
        }
    }
    const auto p = deepfm.parameters();
    const auto ref_y = ref::linear_forward(cat, as_double(p[0]->value), as_double(p[1]->value), B,
                                           192, 30, ref::Act::kIdentity);
    CHECK_RELATIVE(as_double(y), ref_y.value, 1e-5);
    // The gradient splits back into the embeddings' shapes.
    const Tensor up = random_input({B, 30}, 3);
    const std::vector<double> gx = as_double(deepfm.backward(up));
    const std::vector<Tensor>& grads = deepfm.input_grads();
    REQUIRE(grads.size() == 2);
    CHECK(grads[0].shape() == Shape{B, 2, 64});
    CHECK(grads[1].shape() == Shape{B, 2, 32});
    CHECK(grads[1].to_vector<float>()[0] == static_cast<float>(gx[128]));    // row 0, after 128
    CHECK(grads[0].to_vector<float>()[128] == static_cast<float>(gx[192]));  // row 1 starts
}

TEST_CASE("DeepFM: gradients match finite differences", "[modules]") {
    DeepFM deepfm(std::make_unique<MLP>("dense_module", 12, std::vector<int64_t>{5, 3},
                                        Activation::kRelu, 2));
    check_module_gradients(
        deepfm, random_input({3, 12}, 4),
        [](const std::vector<double>& x, const std::vector<std::vector<double>>& q) {
            const auto h = ref::linear_forward(x, q[0], q[1], 3, 12, 5, ref::Act::kRelu).value;
            return ref::linear_forward(h, q[2], q[3], 3, 5, 3, ref::Act::kRelu).value;
        });
}

TEST_CASE("FactorizationMachine: the same embeddings give [B, 1]; gradients", "[modules]") {
    const int64_t B = 3;
    FactorizationMachine fm;
    const std::vector<Tensor> emb = {random_input({B, 2, 64}, 1), random_input({B, 2, 32}, 2)};
    CHECK(fm.forward(emb).shape() == Shape{B, 1});
    CHECK(fm.parameters().empty());
    fm.backward(random_input({B, 1}, 5));
    CHECK(fm.input_grads()[1].shape() == Shape{B, 2, 32});
    check_module_gradients(
        fm, random_input({B, 7}, 6),
        [](const std::vector<double>& x, const std::vector<std::vector<double>>&) {
            return ref::factorization_machine_forward(x, 3, 7).value;
        });
}

TEST_CASE("DeepFM and FM: a steady batch shape allocates nothing after the first step",
          "[modules]") {
    DeepFM deepfm(std::make_unique<Perceptron>("d", 24, 4, Activation::kRelu, 1));
    check_steady_state_allocates_nothing(deepfm, random_input({6, 24}, 7));
    FactorizationMachine fm;
    check_steady_state_allocates_nothing(fm, random_input({6, 24}, 8));
}
