// Linear on CUDA. Forward: one cuBLASLt matmul with the bias and relu fused into its epilogue
// (CUBLASLT_EPILOGUE_BIAS / RELU / RELU_BIAS), so y is written once; sigmoid has no cuBLASLt
// epilogue and takes one elementwise pass after the biased GEMM. Backward: one pass forms
// g = grad_y * act'(y) (skipped for identity), grad_b is a fixed-order column sum of g, and
// grad_w, grad_x are two cuBLAS GEMMs. In bf16 math every GEMM reads bf16 copies of its operands
// (common.cuh: Bf16Operand). Letters: B rows, I inputs, O outputs.
#include <cublasLt.h>

#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "kernels/cuda/common.cuh"
#include "kernels/linear.h"

namespace shardrec::kernels::cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;  // cuBLAS's advice for Hopper

cublasLtHandle_t lt_handle(int device) {
    thread_local std::unordered_map<int, cublasLtHandle_t> handles;
    cublasLtHandle_t& h = handles[device];
    if (h == nullptr) {
        SR_CUBLAS_CHECK(cublas_api().lt_create(&h));
    }
    return h;
}

// The descriptors of one matmul, destroyed together.
struct LtMatmul {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;

    LtMatmul() = default;
    LtMatmul(const LtMatmul&) = delete;
    LtMatmul& operator=(const LtMatmul&) = delete;

    ~LtMatmul() {
        if (pref != nullptr)
            cublas_api().lt_matmul_preference_destroy(pref);
        if (c != nullptr)
            cublas_api().lt_matrix_layout_destroy(c);
        if (b != nullptr)
            cublas_api().lt_matrix_layout_destroy(b);
        if (a != nullptr)
            cublas_api().lt_matrix_layout_destroy(a);
        if (op != nullptr)
            cublas_api().lt_matmul_desc_destroy(op);
    }
};

// The descriptors and the heuristic's algorithm of one linear shape, made once per (device,
// shape, bias, relu, math) and reused by every later call: the heuristic query costs more than a
// small GEMM. The bias pointer is set on each call.
struct LtPlan {
    LtMatmul m;
    cublasLtMatmulHeuristicResult_t result{};
};

LtPlan& lt_plan(
    int device, int64_t batch, int64_t in, int64_t out, bool bias, bool relu, GemmMath math) {
    using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, bool, GemmMath>;
    thread_local std::map<Key, std::unique_ptr<LtPlan>> plans;
    std::unique_ptr<LtPlan>& plan = plans[Key{device, batch, in, out, bias, relu, math}];
    if (plan != nullptr)
        return *plan;
    plan = std::make_unique<LtPlan>();
    LtMatmul& m = plan->m;
    // bf16 math: x and w come as Bf16Operand copies (row stride rounded up to 8); y stays fp32.
    const bool bf16 = math == GemmMath::kBf16;
    const cudaDataType_t operand = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const int64_t ld = bf16 ? ceil_div(in, 8) * 8 : in;
    SR_CUBLAS_CHECK(cublas_api().lt_matmul_desc_create(&m.op, gemm_compute_type(math), CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    SR_CUBLAS_CHECK(cublas_api().lt_matmul_desc_set_attribute(m.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                              &ta, sizeof(ta)));
    SR_CUBLAS_CHECK(cublas_api().lt_matmul_desc_set_attribute(m.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                              &tb, sizeof(tb)));
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (bias) {
        epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    } else if (relu) {
        epilogue = CUBLASLT_EPILOGUE_RELU;
    }
    SR_CUBLAS_CHECK(cublas_api().lt_matmul_desc_set_attribute(m.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                              &epilogue, sizeof(epilogue)));
    SR_CUBLAS_CHECK(cublas_api().lt_matrix_layout_create(&m.a, operand, in, out, ld));
    SR_CUBLAS_CHECK(cublas_api().lt_matrix_layout_create(&m.b, operand, in, batch, ld));
    SR_CUBLAS_CHECK(cublas_api().lt_matrix_layout_create(&m.c, CUDA_R_32F, out, batch, out));
    SR_CUBLAS_CHECK(cublas_api().lt_matmul_preference_create(&m.pref));
    SR_CUBLAS_CHECK(cublas_api().lt_matmul_preference_set_attribute(
        m.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtWorkspaceBytes,
        sizeof(kLtWorkspaceBytes)));
    int found = 0;
    SR_CUBLAS_CHECK(cublas_api().lt_matmul_algo_get_heuristic(
        lt_handle(device), m.op, m.a, m.b, m.c, m.c, m.pref, 1, &plan->result, &found));
    SR_CHECK(found > 0, "cuBLASLt has no algorithm for linear B={} I={} O={}", batch, in, out);
    return *plan;
}

// y [B, O] = x [B, I] w [O, I]^T (+ bias [O]) (relu), row-major. Column-major, that is
// y^T (O x B, ld O) = op_T(w^T: I x O, ld I) * (x^T: I x B, ld I), the bias along y^T's rows.
void lt_linear(Stream& stream,
               const float* x,
               const float* w,
               const float* bias,
               bool relu,
               float* y,
               int64_t batch,
               int64_t in,
               int64_t out) {
    const int device = stream.device().index;
    const GemmMath math = gemm_math();  // once: the plan and the operands must agree
    LtPlan& plan = lt_plan(device, batch, in, out, bias != nullptr, relu, math);
    if (bias != nullptr) {
        SR_CUBLAS_CHECK(cublas_api().lt_matmul_desc_set_attribute(
            plan.m.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    DeviceScratch workspace(stream, kLtWorkspaceBytes);
    const float alpha = 1.f, beta = 0.f;
    const void* a = w;
    const void* b = x;
    std::optional<Bf16Operand> w16, x16;
    if (math == GemmMath::kBf16) {
        a = w16.emplace(stream, w, out, in, in).data();
        b = x16.emplace(stream, x, batch, in, in).data();
    }
    SR_CUBLAS_CHECK(cublas_api().lt_matmul(
        lt_handle(device), plan.m.op, &alpha, a, plan.m.a, b, plan.m.b, &beta, y, plan.m.c, y,
        plan.m.c, &plan.result.algo, workspace.data(), kLtWorkspaceBytes, cuda_stream(stream)));
}

__global__ void sigmoid_inplace_kernel(int64_t n, float* y) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        y[i] = sigmoid_f32(y[i]);
    }
}

__global__ void activation_grad_kernel(
    int64_t n, Activation act, const float* y, const float* grad_y, float* g) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        g[i] = grad_y[i] * activation_grad_from_output(act, y[i]);
    }
}

}  // namespace

void linear_forward(const Tensor& x,
                    const Tensor& w,
                    const Tensor* bias,
                    Activation act,
                    Tensor& y,
                    Stream& stream) {
    const int64_t batch = x.size(0), in = x.size(1), out = w.size(0);
    lt_linear(stream, x.data<float>(), w.data<float>(),
              bias != nullptr ? bias->data<float>() : nullptr, act == Activation::kRelu,
              y.data<float>(), batch, in, out);
    if (act == Activation::kSigmoid) {
        const cudaStream_t s = cuda_stream(stream);
        sigmoid_inplace_kernel<<<blocks_for(batch * out), kBlockSize, 0, s>>>(batch * out,
                                                                              y.data<float>());
        SR_CUDA_LAUNCH_CHECK(s);
    }
}

void linear_backward(const Tensor& x,
                     const Tensor& w,
                     const Tensor& y,
                     const Tensor& grad_y,
                     Activation act,
                     Tensor* grad_x,
                     Tensor& grad_w,
                     Tensor* grad_b,
                     Stream& stream) {
    const int64_t batch = x.size(0), in = x.size(1), out = w.size(0);
    const cudaStream_t s = cuda_stream(stream);
    const bool identity = act == Activation::kIdentity;
    DeviceScratch scratch(stream, identity ? 0 : static_cast<size_t>(batch * out) * sizeof(float));
    const float* g = grad_y.data<float>();
    if (!identity) {
        activation_grad_kernel<<<blocks_for(batch * out), kBlockSize, 0, s>>>(
            batch * out, act, y.data<float>(), grad_y.data<float>(), scratch.as<float>());
        SR_CUDA_LAUNCH_CHECK(s);
        g = scratch.as<float>();
    }
    if (grad_b != nullptr) {
        column_sums(stream, g, batch, out, grad_b->data<float>());
    }
    const Bf16OperandScope g_once(stream, g, batch, out, out);  // bf16 math: read by both GEMMs
    // grad_w [O, I] = g^T [O, B] x [B, I]
    sgemm(stream, Trans::kYes, Trans::kNo, out, in, batch, g, out, x.data<float>(), in, 0.f,
          grad_w.data<float>(), in);
    if (grad_x != nullptr) {
        // grad_x [B, I] = g [B, O] w [O, I]
        sgemm(stream, Trans::kNo, Trans::kNo, batch, in, out, g, out, w.data<float>(), in, 0.f,
              grad_x->data<float>(), in);
    }
}

}  // namespace shardrec::kernels::cuda
