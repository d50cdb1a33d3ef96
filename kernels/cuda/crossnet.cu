// Cross layer on CUDA: the products are cuBLAS GEMMs (xl W^T, or xl V^T then W^T) and one
// elementwise pass adds the bias, scales by x0 and adds the residual (it writes u and out, both
// of which the layer must produce). Backward: one pass forms gu = grad_out * x0, updates grad_x0,
// starts grad_xl and sums gu over blocks of rows, the first level of grad_b's fixed-order column
// sum (common.cuh's column_sums, the same sums in the same order); the rest are GEMMs, the input
// gradient accumulating onto grad_xl (beta = 1). Letters: B batch, N features, r low rank.
#include "kernels/crossnet.h"
#include "kernels/cuda/common.cuh"

namespace shardrec::kernels::cuda {
namespace {

// u += bias; out = x0 * u + xl.
__global__ void crossnet_forward_epilogue_kernel(int64_t batch,
                                                 int64_t n,
                                                 const float* x0,
                                                 const float* xl,
                                                 const float* bias,
                                                 float* u,
                                                 float* out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= batch * n) {
        return;
    }
    const float ui = u[i] + bias[i % n];
    u[i] = ui;
    out[i] = x0[i] * ui + xl[i];
}

// gu = g x0; grad_x0 += g u; grad_xl = g, or += g when it is grad_x0 (layer 0); partial[p, c] =
// the sum of gu[r, c] over the rows r of block p (kColumnSumRows rows), in row order. A thread
// per column of a block of rows. The inputs are never written here (restrict lets the loads of
// the next row go ahead of this row's stores); grad_xl may be grad_x0.
__global__ void crossnet_backward_prologue_kernel(int64_t batch,
                                                  int64_t n,
                                                  const float* __restrict__ grad_out,
                                                  const float* __restrict__ x0,
                                                  const float* __restrict__ u,
                                                  float* gu,
                                                  float* grad_x0,
                                                  float* grad_xl,
                                                  float* partial) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t p = blockIdx.y;
    if (c >= n) {
        return;
    }
    const int64_t end = min(batch, (p + 1) * kColumnSumRows);
    float sum = 0.f;
#pragma unroll 4
    for (int64_t r = p * kColumnSumRows; r < end; ++r) {
        const int64_t i = r * n + c;
        const float g = grad_out[i];
        const float gui = g * x0[i];
        const float gx0 = grad_x0[i] + g * u[i];
        gu[i] = gui;
        sum += gui;
        if (grad_xl == grad_x0) {
            grad_x0[i] = gx0 + g;
        } else {
            grad_x0[i] = gx0;
            grad_xl[i] = g;
        }
    }
    partial[p * n + c] = sum;
}

}  // namespace

void crossnet_forward(const Tensor& x0,
                      const Tensor& xl,
                      const Tensor& w,
                      const Tensor* v,
                      const Tensor& bias,
                      Tensor& out,
                      Tensor& u,
                      Tensor* vx,
                      Stream& stream) {
    const int64_t batch = x0.size(0), n = x0.size(1);
    const float* xlp = xl.data<float>();
    float* up = u.data<float>();
    if (v == nullptr) {
        sgemm(stream, Trans::kNo, Trans::kYes, batch, n, n, xlp, n, w.data<float>(), n, 0.f, up, n);
    } else {
        const int64_t r = v->size(0);
        float* vxp = vx->data<float>();
        sgemm(stream, Trans::kNo, Trans::kYes, batch, r, n, xlp, n, v->data<float>(), n, 0.f, vxp,
              r);
        sgemm(stream, Trans::kNo, Trans::kYes, batch, n, r, vxp, r, w.data<float>(), r, 0.f, up, n);
    }
    const cudaStream_t s = cuda_stream(stream);
    crossnet_forward_epilogue_kernel<<<blocks_for(batch * n), kBlockSize, 0, s>>>(
        batch, n, x0.data<float>(), xlp, bias.data<float>(), up, out.data<float>());
    SR_CUDA_LAUNCH_CHECK(s);
}

void crossnet_backward(const Tensor& x0,
                       const Tensor& xl,
                       const Tensor& w,
                       const Tensor* v,
                       const Tensor& u,
                       const Tensor* vx,
                       const Tensor& grad_out,
                       Tensor& grad_x0,
                       Tensor& grad_xl,
                       Tensor& grad_w,
                       Tensor* grad_v,
                       Tensor& grad_b,
                       Stream& stream) {
    const int64_t batch = x0.size(0), n = x0.size(1);
    const int64_t r = v != nullptr ? v->size(0) : 0;
    const cudaStream_t s = cuda_stream(stream);
    const int64_t num_partials = ceil_div(batch, kColumnSumRows);
    SR_CHECK(num_partials < 65536, "crossnet backward on CUDA: {} rows is too many", batch);
    DeviceScratch scratch(stream,
                          static_cast<size_t>(batch * (n + r) + num_partials * n) * sizeof(float));
    float* gu = scratch.as<float>();  // [B, N]
    float* gv = gu + batch * n;       // [B, r]
    float* partial = gv + batch * r;  // [num_partials, N]
    float* gxl = grad_xl.data<float>();
    crossnet_backward_prologue_kernel<<<dim3(blocks_for(n), static_cast<unsigned>(num_partials)),
                                        kBlockSize, 0, s>>>(batch, n, grad_out.data<float>(),
                                                            x0.data<float>(), u.data<float>(), gu,
                                                            grad_x0.data<float>(), gxl, partial);
    SR_CUDA_LAUNCH_CHECK(s);
    column_sums(stream, partial, num_partials, n, grad_b.data<float>());
    const float* xlp = xl.data<float>();
    const Bf16OperandScope gu_once(stream, gu, batch, n, n);  // bf16 math: read by two GEMMs
    if (v == nullptr) {
        // grad_w [N, N] = gu^T xl;  grad_xl += gu W
        sgemm(stream, Trans::kYes, Trans::kNo, n, n, batch, gu, n, xlp, n, 0.f,
              grad_w.data<float>(), n);
        sgemm(stream, Trans::kNo, Trans::kNo, batch, n, n, gu, n, w.data<float>(), n, 1.f, gxl, n);
        return;
    }
    // gv [B, r] = gu W;  grad_w [N, r] = gu^T vx;  grad_v [r, N] = gv^T xl;  grad_xl += gv V
    sgemm(stream, Trans::kNo, Trans::kNo, batch, r, n, gu, n, w.data<float>(), r, 0.f, gv, r);
    sgemm(stream, Trans::kYes, Trans::kNo, n, r, batch, gu, n, vx->data<float>(), r, 0.f,
          grad_w.data<float>(), r);
    const Bf16OperandScope gv_once(stream, gv, batch, r, r);
    sgemm(stream, Trans::kYes, Trans::kNo, r, n, batch, gv, r, xlp, n, 0.f, grad_v->data<float>(),
          n);
    sgemm(stream, Trans::kNo, Trans::kNo, batch, n, r, gv, r, v->data<float>(), n, 1.f, gxl, n);
}

}  // namespace shardrec::kernels::cuda
