// Float64 reference of one LowRankMixtureCrossNet layer (the judge of kernels/mixture_crossnet.h):
//   a1_k = g(xl V_k^T), a2_k = g(a1_k C_k^T), e_k = a2_k U_k^T + b,
//   p = softmax(xl G^T) (K > 1; p = 1 for K = 1),  out = sum_k p_k x0 * e_k + xl.
// Letters: B batch, N features, K experts, r low rank.
#pragma once

#include <cstdint>
#include <vector>

#include "test/reference/linear.h"

namespace shardrec::ref {

struct MixtureCrossNetParams {
    int64_t B = 0, N = 0, K = 1, r = 1;
    Act act = Act::kRelu;
    std::vector<double> u;      // [K, N, r]
    std::vector<double> c;      // [K, r, r]
    std::vector<double> v;      // [K, r, N]
    std::vector<double> bias;   // [N]
    std::vector<double> gates;  // [K, N], empty when K = 1
};

struct MixtureCrossNetForward {
    DenseValues out;    // [B, N],    chain N + 2r + K + 6
    DenseValues a1;     // [B, K, r], chain N + 1
    DenseValues a2;     // [B, K, r], chain N + r + 2
    DenseValues e;      // [B, K, N], chain N + 2r + 3
    DenseValues probs;  // [B, K],    empty when K = 1
};

MixtureCrossNetForward mixture_crossnet_forward(const MixtureCrossNetParams& p,
                                                const std::vector<double>& x0,
                                                const std::vector<double>& xl);

// The saved forward values and the accumulated-gradient initial values, all exact inputs.
struct MixtureCrossNetSavedValues {
    std::vector<double> a1, a2, e, probs;  // probs empty when K = 1
};

struct MixtureCrossNetGrads {
    DenseValues x0;     // [B, N] = init + sum_k p_k grad_out e_k
    DenseValues xl;     // [B, N]
    DenseValues u;      // [K, N, r]
    DenseValues c;      // [K, r, r]
    DenseValues v;      // [K, r, N]
    DenseValues bias;   // [N]
    DenseValues gates;  // [K, N] = init + ..., empty when K = 1
};

MixtureCrossNetGrads mixture_crossnet_backward(const MixtureCrossNetParams& p,
                                               const std::vector<double>& x0,
                                               const std::vector<double>& xl,
                                               const MixtureCrossNetSavedValues& saved,
                                               const std::vector<double>& grad_out,
                                               const std::vector<double>& grad_x0_init,
                                               const std::vector<double>& grad_gates_init);

}  // namespace shardrec::ref
