// One layer of TorchRec's LowRankMixtureCrossNet (DCN-v2 mixture of low-rank experts, F4), one
// layer per call. For each expert k, with g the activation (TorchRec default relu):
//   a1_k = g(xl V_k^T)   a2_k = g(a1_k C_k^T)   e_k = a2_k U_k^T + b   expert_k = x0 * e_k
// With K > 1 experts, gate logits z_k = xl . G_k (TorchRec gates[k] = Linear(N, 1, bias=False),
// shared by all layers) and p = softmax_k(z):  x_{l+1} = sum_k p_k expert_k + xl.
// With K = 1 the gate is skipped:            x_{l+1} = expert_0 + xl.
// Letters: B batch, N features, K experts, r low rank.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "kernels/linear.h"

namespace shardrec::kernels {

// Parameters of one layer (f32, contiguous). gates is nullptr exactly when K = 1.
struct MixtureCrossNetWeights {
    const Tensor* u;      // [K, N, r]  TorchRec U_kernels[l]
    const Tensor* c;      // [K, r, r]  TorchRec C_kernels[l]
    const Tensor* v;      // [K, r, N]  TorchRec V_kernels[l]
    const Tensor* bias;   // [N]        TorchRec bias[l], shared by the experts of the layer
    const Tensor* gates;  // [K, N]     row k = gates[k].weight; nullptr when K = 1
};

// What forward saves for backward (all written by forward).
struct MixtureCrossNetSaved {
    Tensor* a1;     // [B, K, r]  g(xl V_k^T)
    Tensor* a2;     // [B, K, r]  g(a1_k C_k^T)
    Tensor* e;      // [B, K, N]  a2_k U_k^T + b
    Tensor* probs;  // [B, K]     softmax of the gate logits; nullptr when K = 1
};

// Gradients of one layer. grad_x0 and grad_gates are ACCUMULATED (+=): x0 and the gates feed
// every layer, so the caller zeroes them once per backward. The others are written. xl may be
// the same tensor as x0 (layer 0, where xl is x0): it then ends holding the sum of both.
struct MixtureCrossNetGrads {
    Tensor* x0;     // [B, N]     +=
    Tensor* xl;     // [B, N]     written
    Tensor* u;      // [K, N, r]  written
    Tensor* c;      // [K, r, r]  written
    Tensor* v;      // [K, r, N]  written
    Tensor* bias;   // [N]        written, summed over experts then rows, in order
    Tensor* gates;  // [K, N]     +=; nullptr when K = 1
};

//   x0, xl [B, N] f32 (may be the same tensor); out [B, N] written.
// act is kIdentity, kRelu or kSigmoid (derivatives from the saved a1, a2).
void mixture_crossnet_forward(const Tensor& x0,
                              const Tensor& xl,
                              const MixtureCrossNetWeights& weights,
                              Activation act,
                              Tensor& out,
                              const MixtureCrossNetSaved& saved,
                              Stream& stream);

// Backward from grad_out [B, N], given the forward's inputs and saved tensors. The CPU backend
// keeps a thread-local scratch of B*(N + r + K*r + 2K) floats.
void mixture_crossnet_backward(const Tensor& x0,
                               const Tensor& xl,
                               const MixtureCrossNetWeights& weights,
                               Activation act,
                               const MixtureCrossNetSaved& saved,
                               const Tensor& grad_out,
                               const MixtureCrossNetGrads& grads,
                               Stream& stream);

namespace cpu {
void mixture_crossnet_forward(const Tensor& x0,
                              const Tensor& xl,
                              const MixtureCrossNetWeights& weights,
                              Activation act,
                              Tensor& out,
                              const MixtureCrossNetSaved& saved);
void mixture_crossnet_backward(const Tensor& x0,
                               const Tensor& xl,
                               const MixtureCrossNetWeights& weights,
                               Activation act,
                               const MixtureCrossNetSaved& saved,
                               const Tensor& grad_out,
                               const MixtureCrossNetGrads& grads);
}  // namespace cpu

namespace cuda {
void mixture_crossnet_forward(const Tensor& x0,
                              const Tensor& xl,
                              const MixtureCrossNetWeights& weights,
                              Activation act,
                              Tensor& out,
                              const MixtureCrossNetSaved& saved,
                              Stream& stream);
void mixture_crossnet_backward(const Tensor& x0,
                               const Tensor& xl,
                               const MixtureCrossNetWeights& weights,
                               Activation act,
                               const MixtureCrossNetSaved& saved,
                               const Tensor& grad_out,
                               const MixtureCrossNetGrads& grads,
                               Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
