// Mixture cross layer on CUDA, as the CPU backend: every product is a cuBLAS GEMM over the whole
// batch (the K experts' V projections one [B, K r] GEMM; C and U strided-batched over the
// experts' column blocks of the saved [B, K, r] / [B, K, N] tensors), with elementwise kernels
// for the activations, the gate softmax, and bias + x0 scaling + residual. Every reduction over
// rows is a fixed-order column sum. Letters: B batch, N features, K experts, r low rank.
#include "kernels/cuda/common.cuh"
#include "kernels/mixture_crossnet.h"

namespace shardrec::kernels::cuda {
namespace {

__global__ void activate_inplace_kernel(int64_t count, Activation act, float* p) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < count) {
        p[i] = apply_activation(act, p[i]);
    }
}

// p *= act'(y), from the activation's output y.
__global__ void scale_by_activation_grad_kernel(int64_t count,
                                                Activation act,
                                                const float* y,
                                                float* p) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < count) {
        p[i] *= activation_grad_from_output(act, y[i]);
    }
}

// Row-wise softmax of z [B, K] in place (max-shifted, summed over k in order): a thread per row.
__global__ void softmax_rows_kernel(int64_t batch, int64_t num_experts, float* z) {
    const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (b >= batch) {
        return;
    }
    float* zb = z + b * num_experts;
    float mx = zb[0];
    for (int64_t k = 1; k < num_experts; ++k) {
        mx = fmaxf(mx, zb[k]);
    }
    float sum = 0.f;
    for (int64_t k = 0; k < num_experts; ++k) {
        zb[k] = expf(zb[k] - mx);
        sum += zb[k];
    }
    for (int64_t k = 0; k < num_experts; ++k) {
        zb[k] /= sum;
    }
}

// e[b, k, :] += bias; out[b, :] = sum_k p_k x0 e_k + xl (experts in order).
__global__ void mixture_output_kernel(int64_t batch,
                                      int64_t n,
                                      int64_t num_experts,
                                      const float* x0,
                                      const float* xl,
                                      const float* bias,
                                      const float* probs,
                                      float* e,
                                      float* out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= batch * n) {
        return;
    }
    const int64_t b = i / n;
    const int64_t col = i % n;
    float o = 0.f;
    for (int64_t k = 0; k < num_experts; ++k) {
        float* ebk = e + (b * num_experts + k) * n;  // e[b, k, :]
        const float ek = ebk[col] + bias[col];
        ebk[col] = ek;
        const float p = probs != nullptr ? probs[b * num_experts + k] : 1.f;
        o += p * (x0[i] * ek);
    }
    out[i] = o + xl[i];
}

// ge[b, k, :] = p_k grad_out x0; grad_x0 += sum_k p_k grad_out e_k; grad_xl = grad_out (or +=
// when it is grad_x0).
__global__ void mixture_backward_prologue_kernel(int64_t batch,
                                                 int64_t n,
                                                 int64_t num_experts,
                                                 const float* grad_out,
                                                 const float* x0,
                                                 const float* e,
                                                 const float* probs,
                                                 float* ge,
                                                 float* grad_x0,
                                                 float* grad_xl) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= batch * n) {
        return;
    }
    const int64_t b = i / n;
    const int64_t col = i % n;
    float gx0 = grad_x0[i];
    for (int64_t k = 0; k < num_experts; ++k) {
        const float p = probs != nullptr ? probs[b * num_experts + k] : 1.f;
        const float g = p * grad_out[i];
        ge[(b * num_experts + k) * n + col] = g * x0[i];
        gx0 += g * e[(b * num_experts + k) * n + col];
    }
    if (grad_xl == grad_x0) {
        grad_x0[i] = gx0 + grad_out[i];
    } else {
        grad_x0[i] = gx0;
        grad_xl[i] = grad_out[i];
    }
}

// Gate backward, a block per row b: gw_k = sum_n grad_out x0 e_k (fixed-order block sums), then
// gz_k = p_k (gw_k - sum_j p_j gw_j).
__global__ void gate_grad_kernel(int64_t n,
                                 int64_t num_experts,
                                 const float* grad_out,
                                 const float* x0,
                                 const float* e,
                                 const float* probs,
                                 float* gz) {
    __shared__ float scratch[kWarpSize];
    const int64_t b = blockIdx.x;
    float mean = 0.f;
    for (int64_t k = 0; k < num_experts; ++k) {
        const float* ebk = e + (b * num_experts + k) * n;
        float gw = 0.f;
        for (int64_t col = threadIdx.x; col < n; col += blockDim.x) {
            gw += grad_out[b * n + col] * x0[b * n + col] * ebk[col];
        }
        gw = block_sum(gw, scratch);
        if (threadIdx.x == 0) {
            gz[b * num_experts + k] = gw;
        }
        mean += probs[b * num_experts + k] * gw;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int64_t k = 0; k < num_experts; ++k) {
            gz[b * num_experts + k] = probs[b * num_experts + k] * (gz[b * num_experts + k] - mean);
        }
    }
}

void launch_elementwise_check(cudaStream_t s) {
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace

void mixture_crossnet_forward(const Tensor& x0,
                              const Tensor& xl,
                              const MixtureCrossNetWeights& wt,
                              Activation act,
                              Tensor& out,
                              const MixtureCrossNetSaved& saved,
                              Stream& stream) {
    const int64_t batch = x0.size(0), n = x0.size(1), num_experts = wt.v->size(0),
                  r = wt.v->size(1);
    const int64_t kr = num_experts * r;
    const cudaStream_t s = cuda_stream(stream);
    const float* xlp = xl.data<float>();
    float* a1 = saved.a1->data<float>();  // [B, K, r]
    float* a2 = saved.a2->data<float>();  // [B, K, r]
    float* e = saved.e->data<float>();    // [B, K, N]
    // a1 = g(xl V^T), all experts at once: V is [K r, N].
    sgemm(stream, Trans::kNo, Trans::kYes, batch, kr, n, xlp, n, wt.v->data<float>(), n, 0.f, a1,
          kr);
    activate_inplace_kernel<<<blocks_for(batch * kr), kBlockSize, 0, s>>>(batch * kr, act, a1);
    launch_elementwise_check(s);
    // a2_k = a1_k C_k^T, columns [k r, (k+1) r) of [B, K r]
    sgemm_strided_batched(stream, Trans::kNo, Trans::kYes, batch, r, r, a1, kr, r,
                          wt.c->data<float>(), r, r * r, 0.f, a2, kr, r, num_experts);
    activate_inplace_kernel<<<blocks_for(batch * kr), kBlockSize, 0, s>>>(batch * kr, act, a2);
    launch_elementwise_check(s);
    // e_k = a2_k U_k^T (+ b below), columns [k N, (k+1) N) of [B, K N]
    sgemm_strided_batched(stream, Trans::kNo, Trans::kYes, batch, n, r, a2, kr, r,
                          wt.u->data<float>(), r, n * r, 0.f, e, num_experts * n, n, num_experts);
    float* probs = nullptr;
    if (num_experts > 1) {
        probs = saved.probs->data<float>();
        sgemm(stream, Trans::kNo, Trans::kYes, batch, num_experts, n, xlp, n,
              wt.gates->data<float>(), n, 0.f, probs, num_experts);
        softmax_rows_kernel<<<blocks_for(batch), kBlockSize, 0, s>>>(batch, num_experts, probs);
        launch_elementwise_check(s);
    }
    mixture_output_kernel<<<blocks_for(batch * n), kBlockSize, 0, s>>>(
        batch, n, num_experts, x0.data<float>(), xlp, wt.bias->data<float>(), probs, e,
        out.data<float>());
    launch_elementwise_check(s);
}

void mixture_crossnet_backward(const Tensor& x0,
                               const Tensor& xl,
                               const MixtureCrossNetWeights& wt,
                               Activation act,
                               const MixtureCrossNetSaved& saved,
                               const Tensor& grad_out,
                               const MixtureCrossNetGrads& grads,
                               Stream& stream) {
    const int64_t batch = x0.size(0), n = x0.size(1), num_experts = wt.v->size(0),
                  r = wt.v->size(1);
    const int64_t kr = num_experts * r;
    const cudaStream_t s = cuda_stream(stream);
    // Scratch: ge [B, K, N], gq [B, K r], gp [B, K r], gz [B, K].
    DeviceScratch scratch(
        stream,
        static_cast<size_t>(batch * (num_experts * n + 2 * kr + num_experts)) * sizeof(float));
    float* ge = scratch.as<float>();
    float* gq = ge + batch * num_experts * n;
    float* gp = gq + batch * kr;
    float* gz = gp + batch * kr;
    const float* gop = grad_out.data<float>();
    const float* x0p = x0.data<float>();
    const float* xlp = xl.data<float>();
    const float* a1 = saved.a1->data<float>();
    const float* a2 = saved.a2->data<float>();
    const float* e = saved.e->data<float>();
    const float* probs = num_experts > 1 ? saved.probs->data<float>() : nullptr;
    float* gxl = grads.xl->data<float>();
    mixture_backward_prologue_kernel<<<blocks_for(batch * n), kBlockSize, 0, s>>>(
        batch, n, num_experts, gop, x0p, e, probs, ge, grads.x0->data<float>(), gxl);
    launch_elementwise_check(s);
    // grad_b: summed over experts and rows ([B K, N] column sums).
    column_sums(stream, ge, batch * num_experts, n, grads.bias->data<float>());
    if (num_experts > 1) {
        gate_grad_kernel<<<static_cast<unsigned>(batch), kBlockSize, 0, s>>>(n, num_experts, gop,
                                                                             x0p, e, probs, gz);
        launch_elementwise_check(s);
        // grad_gates += gz^T xl;  grad_xl += gz G
        sgemm(stream, Trans::kYes, Trans::kNo, num_experts, n, batch, gz, num_experts, xlp, n, 1.f,
              grads.gates->data<float>(), n);
        sgemm(stream, Trans::kNo, Trans::kNo, batch, n, num_experts, gz, num_experts,
              wt.gates->data<float>(), n, 1.f, gxl, n);
    }
    // Per expert k (batched): grad_U_k = ge_k^T a2_k [N, r]; gq_k = ge_k U_k [B, r].
    sgemm_strided_batched(stream, Trans::kYes, Trans::kNo, n, r, batch, ge, num_experts * n, n, a2,
                          kr, r, 0.f, grads.u->data<float>(), r, n * r, num_experts);
    sgemm_strided_batched(stream, Trans::kNo, Trans::kNo, batch, r, n, ge, num_experts * n, n,
                          wt.u->data<float>(), r, n * r, 0.f, gq, kr, r, num_experts);
    scale_by_activation_grad_kernel<<<blocks_for(batch * kr), kBlockSize, 0, s>>>(batch * kr, act,
                                                                                  a2, gq);
    launch_elementwise_check(s);
    // grad_C_k = gq_k^T a1_k [r, r]; gp_k = gq_k C_k [B, r]; then gp *= g'(a1).
    sgemm_strided_batched(stream, Trans::kYes, Trans::kNo, r, r, batch, gq, kr, r, a1, kr, r, 0.f,
                          grads.c->data<float>(), r, r * r, num_experts);
    sgemm_strided_batched(stream, Trans::kNo, Trans::kNo, batch, r, r, gq, kr, r,
                          wt.c->data<float>(), r, r * r, 0.f, gp, kr, r, num_experts);
    scale_by_activation_grad_kernel<<<blocks_for(batch * kr), kBlockSize, 0, s>>>(batch * kr, act,
                                                                                  a1, gp);
    launch_elementwise_check(s);
    // grad_V = gp^T xl [K r, N]; grad_xl += gp V
    sgemm(stream, Trans::kYes, Trans::kNo, kr, n, batch, gp, kr, xlp, n, 0.f,
          grads.v->data<float>(), n);
    sgemm(stream, Trans::kNo, Trans::kNo, batch, n, kr, gp, kr, wt.v->data<float>(), n, 1.f, gxl,
          n);
}

}  // namespace shardrec::kernels::cuda
