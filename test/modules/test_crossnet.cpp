// The cross nets: [3, 10] -> [3, 10] with TorchRec's parameter names, and every gradient (input
// and parameters, accumulated across layers through x0) against finite differences of a float64
// forward composed from the reference layer ops.
#include <catch2/catch.hpp>

#include "engine/modules/crossnet.h"
#include "engine/modules/mlp.h"
#include "kernels/linear.h"
#include "test/modules/dense_gradcheck.h"
#include "test/reference/crossnet.h"
#include "test/reference/mixture_crossnet.h"
#include "test/reference/vector_crossnet.h"

using namespace shardrec;
using namespace shardrec::test;
using kernels::Activation;
using V = std::vector<double>;

namespace {

// params: L W's, then (low rank) L V's, then L biases, in parameters() order.
RefForward crossnet_reference(int64_t B, int64_t N, size_t L, int64_t r) {
    return [=](const V& x, const std::vector<V>& p) {
        V xl = x;
        for (size_t l = 0; l < L; ++l) {
            const V& w = p[l];
            const V v = r > 0 ? p[L + l] : V{};
            const V& bias = p[(r > 0 ? 2 : 1) * L + l];
            xl = ref::crossnet_forward(x, xl, w, v, bias, B, N, r).out.value;
        }
        return xl;
    };
}

RefForward vector_crossnet_reference(int64_t B, int64_t N, size_t L) {
    return [=](const V& x, const std::vector<V>& p) {
        V xl = x;
        for (size_t l = 0; l < L; ++l) {
            xl = ref::vector_crossnet_forward(x, xl, p[l], p[L + l], B, N).out.value;
        }
        return xl;
    };
}

// params: U's, V's, biases, K gate rows (K > 1), C's (TorchRec's registration order).
RefForward mixture_reference(int64_t B, int64_t N, size_t L, int64_t K, int64_t r) {
    return [=](const V& x, const std::vector<V>& p) {
        const size_t gates = K > 1 ? static_cast<size_t>(K) : 0;
        ref::MixtureCrossNetParams q;
        q.B = B, q.N = N, q.K = K, q.r = r, q.act = ref::Act::kRelu;
        for (size_t k = 0; k < gates; ++k) {
            q.gates.insert(q.gates.end(), p[3 * L + k].begin(), p[3 * L + k].end());
        }
        V xl = x;
        for (size_t l = 0; l < L; ++l) {
            q.u = p[l], q.v = p[L + l], q.bias = p[2 * L + l], q.c = p[3 * L + gates + l];
            xl = ref::mixture_crossnet_forward(q, x, xl).out.value;
        }
        return xl;
    };
}

// Biases start at 0 (TorchRec); give them values so their path is exercised.
void randomise_biases(DenseModule& m) {
    uint64_t stream = 50;
    for (Parameter* p : m.parameters()) {
        if (p->name.find("bias") != std::string::npos) {
            p->value.copy_from(random_input(p->value.shape(), stream++));
        }
    }
}

}  // namespace

TEST_CASE("CrossNet: [3, 10] -> [3, 10], TorchRec names, gradients", "[modules]") {
    CrossNet net("crossnet", 10, 2, 4);
    const std::vector<Parameter*> p = net.parameters();
    REQUIRE(p.size() == 4);
    CHECK(p[0]->name == "crossnet.kernels.0");
    CHECK(p[0]->value.shape() == Shape{10, 10});
    CHECK(p[3]->name == "crossnet.bias.1");
    const Tensor x = random_input({3, 10}, 1);
    CHECK(net.forward(x).shape() == Shape{3, 10});
    randomise_biases(net);
    check_module_gradients(net, x, crossnet_reference(3, 10, 2, 0));
}

TEST_CASE("LowRankCrossNet: [3, 10] -> [3, 10], TorchRec names, gradients", "[modules]") {
    LowRankCrossNet net("inter_arch.crossnet", 10, 3, 2, 4);
    const std::vector<Parameter*> p = net.parameters();
    REQUIRE(p.size() == 9);
    CHECK(p[0]->name == "inter_arch.crossnet.W_kernels.0");
    CHECK(p[0]->value.shape() == Shape{10, 2});
    CHECK(p[3]->name == "inter_arch.crossnet.V_kernels.0");
    CHECK(p[3]->value.shape() == Shape{2, 10});
    CHECK(p[8]->name == "inter_arch.crossnet.bias.2");
    const Tensor x = random_input({3, 10}, 2);
    CHECK(net.forward(x).shape() == Shape{3, 10});
    randomise_biases(net);
    check_module_gradients(net, x, crossnet_reference(3, 10, 3, 2));
}

TEST_CASE("VectorCrossNet: [3, 10] -> [3, 10], TorchRec names, gradients", "[modules]") {
    VectorCrossNet net("vcn", 10, 3, 4);
    const std::vector<Parameter*> p = net.parameters();
    REQUIRE(p.size() == 6);
    CHECK(p[0]->name == "vcn.kernels.0");
    CHECK(p[5]->name == "vcn.bias.2");
    const Tensor x = random_input({3, 10}, 3);
    CHECK(net.forward(x).shape() == Shape{3, 10});
    randomise_biases(net);
    check_module_gradients(net, x, vector_crossnet_reference(3, 10, 3));
}

TEST_CASE("LowRankMixtureCrossNet: [3, 10] -> [3, 10], shared gates, gradients", "[modules]") {
    for (int64_t K : {1, 3}) {
        INFO("num_experts " << K);
        LowRankMixtureCrossNet net("mcn", 10, 2, K, 3, Activation::kRelu, 4);
        const std::vector<Parameter*> p = net.parameters();
        REQUIRE(p.size() == static_cast<size_t>(8 + (K > 1 ? K : 0)));
        CHECK(p[0]->name == "mcn.U_kernels.0");
        CHECK(p[0]->value.shape() == Shape{K, 10, 3});
        if (K > 1) {
            CHECK(p[6]->name == "mcn.gates.0.weight");
            CHECK(p[6]->value.shape() == Shape{1, 10});
        }
        CHECK(p.back()->name == "mcn.C_kernels.1");
        const Tensor x = random_input({3, 10}, 4);
        CHECK(net.forward(x).shape() == Shape{3, 10});
        randomise_biases(net);
        check_module_gradients(net, x, mixture_reference(3, 10, 2, K, 3));
    }
}

TEST_CASE("cross nets: a steady batch shape allocates nothing after the first step", "[modules]") {
    const Tensor x = random_input({5, 12}, 5);
    CrossNet full("a", 12, 2);
    LowRankCrossNet low("b", 12, 3, 4);
    VectorCrossNet vec("c", 12, 2);
    LowRankMixtureCrossNet mix("d", 12, 2, 3, 2);
    for (DenseModule* m : std::vector<DenseModule*>{&full, &low, &vec, &mix}) {
        check_steady_state_allocates_nothing(*m, x);
    }
}

TEST_CASE(
    "bf16 math on the CPU: the backward reads the weight copies its forward rounded, to the "
    "bits of rounding per GEMM",
    "[modules]") {
    struct Restore {
        ~Restore() { kernels::set_gemm_math(kernels::GemmMath::kF32); }
    } restore;

    kernels::set_gemm_math(kernels::GemmMath::kBf16);
    const Tensor x = random_input({9, 12}, 7);
    const Tensor g = random_input({9, 12}, 8);
    CrossNet full("a", 12, 2);
    LowRankCrossNet low("b", 12, 2, 5, 3);
    LowRankMixtureCrossNet mix("c", 12, 2, 3, 4, Activation::kRelu, 4);
    MLP mlp("d", 12, {20, 12}, Activation::kRelu, 5);
    for (DenseModule* m : std::vector<DenseModule*>{&full, &low, &mix, &mlp}) {
        // Without copies (dropped between forward and backward) and with them.
        std::vector<std::vector<float>> grads[2];
        for (int with_copies = 0; with_copies < 2; ++with_copies) {
            const Tensor y = m->forward(x).clone();
            if (with_copies == 0) {
                kernels::drop_gemm_weight_copies();
            }
            grads[with_copies].push_back(y.to_vector<float>());
            grads[with_copies].push_back(m->backward(g).to_vector<float>());
            for (Parameter* p : m->parameters()) {
                grads[with_copies].push_back(p->grad.to_vector<float>());
            }
        }
        CHECK(grads[0] == grads[1]);
    }
}
