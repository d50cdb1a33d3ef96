// The CPU GEMM every dense CPU kernel calls (kernels/cpu/linear.h: sgemm): OpenBLAS sgemm in f32
// math, oneDNN's matmul on bf16 operands with f32 accumulation in bf16 math (AMX tiles where the
// CPU has them, AVX512-BF16 dot products where it has those, oneDNN's own choice otherwise).
//
// Why OpenBLAS stays the f32 backend: measured on the MLP / DCN shapes at B = 2048 and 256
// (bench/results/cpu-20261126-gemm), oneDNN 2.6's f32 matmul is within 10 % of OpenBLAS on the
// large shapes and 2.6x slower on the narrow ones (2048 x 512 -> 256), so one backend per math
// keeps f32 results what they were, bit for bit, with nothing to choose per shape.
//
// bf16: each call rounds op(A) and op(B) to bf16 (nearest even, engine/core/dtype.h) into
// thread-local buffers and runs a matmul primitive built once per shape and kept; beta != 0 is a
// sum post-op, so bias pre-written into C (linear_forward) still costs no extra pass. Same math
// as CUDA's CUBLAS_COMPUTE_32F_FAST_16BF: bf16 products, f32 accumulation, f32 in and out.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "kernels/cpu/linear.h"

namespace shardrec::kernels::cpu {
namespace {

int to_int(int64_t v) {
    SR_DCHECK(v >= 0 && v <= INT32_MAX, "sgemm size {} does not fit OpenBLAS's int", v);
    return static_cast<int>(v);
}

struct OneDnn {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    std::mutex mutex;  // guards primitives; executing one needs no lock
    using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, bool>;
    std::map<Key, dnnl::matmul> primitives;
};

OneDnn& onednn() {
    static OneDnn o;
    return o;
}

// The strides of op(X) [rows, cols] over a tight copy of the stored X: stored as is ([rows, cols])
// or transposed ([cols, rows]).
dnnl::memory::dims op_strides(Trans t, int64_t rows, int64_t cols) {
    return t == Trans::kYes ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1};
}

const dnnl::matmul& bf16_primitive(
    Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, int64_t ldc, bool accumulate) {
    OneDnn& o = onednn();
    const OneDnn::Key key{static_cast<int>(ta), static_cast<int>(tb), m, n, k, ldc, accumulate};
    std::lock_guard<std::mutex> lock(o.mutex);
    auto it = o.primitives.find(key);
    if (it != o.primitives.end()) {
        return it->second;
    }
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({m, k}, dt::bf16, op_strides(ta, m, k));
    const dnnl::memory::desc b({k, n}, dt::bf16, op_strides(tb, k, n));
    const dnnl::memory::desc c({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, o.engine);
    return o.primitives.emplace(key, dnnl::matmul(pd)).first->second;
}

// A tight bf16 copy of the stored [rows, cols] matrix with row stride ld, in `out`.
void to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t>& out) {
    out.resize(static_cast<size_t>(rows * cols));
    uint16_t* o = out.data();
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * ld;
        uint16_t* orow = o + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
            orow[c] = float_to_bf16(xr[c]).bits;
        }
    }
}

void onednn_bf16_gemm(Trans ta,
                      Trans tb,
                      int64_t m,
                      int64_t n,
                      int64_t k,
                      const float* a,
                      int64_t lda,
                      const float* b,
                      int64_t ldb,
                      float beta,
                      float* c,
                      int64_t ldc) {
    SR_CHECK(beta == 0.0f || beta == 1.0f, "bf16 GEMM: beta must be 0 or 1, got {}", beta);
    thread_local std::vector<uint16_t> a16, b16;
    thread_local dnnl::stream stream(onednn().engine);
    // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
    to_bf16(a, ta == Trans::kYes ? k : m, ta == Trans::kYes ? m : k, lda, a16);
    to_bf16(b, tb == Trans::kYes ? n : k, tb == Trans::kYes ? k : n, ldb, b16);
    const dnnl::matmul& mm = bf16_primitive(ta, tb, m, n, k, ldc, beta != 0.0f);
    using dt = dnnl::memory::data_type;
    const auto& e = onednn().engine;
    dnnl::memory am({{m, k}, dt::bf16, op_strides(ta, m, k)}, e, a16.data());
    dnnl::memory bm({{k, n}, dt::bf16, op_strides(tb, k, n)}, e, b16.data());
    dnnl::memory cm({{m, n}, dt::f32, dnnl::memory::dims{ldc, 1}}, e, c);
    mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
}

}  // namespace

void sgemm(Trans ta,
           Trans tb,
           int64_t m,
           int64_t n,
           int64_t k,
           const float* a,
           int64_t lda,
           const float* b,
           int64_t ldb,
           float beta,
           float* c,
           int64_t ldc) {
    if (gemm_math() == GemmMath::kBf16) {
        return onednn_bf16_gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    }
    cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
                tb == Trans::kYes ? CblasTrans : CblasNoTrans, to_int(m), to_int(n), to_int(k),
                1.0f, a, to_int(lda), b, to_int(ldb), beta, c, to_int(ldc));
}

std::string onednn_version() {
    const dnnl_version_t* v = dnnl_version();
    return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

double onednn_bf16_matmul_time_us(int64_t m, int64_t n, int64_t k, int reps) {
    // oneDNN at its best: operands already bf16, the weights reordered once into the blocked
    // layout the primitive prefers (format any), nothing converted per call.
    OneDnn& o = onednn();
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc a({m, k}, dt::bf16, tag::ab);
    const dnnl::memory::desc b_any({k, n}, dt::bf16, tag::any);
    const dnnl::memory::desc c({m, n}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, c), o.engine);
    dnnl::matmul mm(pd);
    std::vector<uint16_t> a16(static_cast<size_t>(m * k), float_to_bf16(0.5f).bits);
    std::vector<uint16_t> b16(static_cast<size_t>(k * n), float_to_bf16(0.25f).bits);
    std::vector<float> cf(static_cast<size_t>(m * n));
    dnnl::stream stream(o.engine);
    dnnl::memory am(a, o.engine, a16.data()), cm(c, o.engine, cf.data());
    dnnl::memory b_plain({{k, n}, dt::bf16, tag::ab}, o.engine, b16.data());
    dnnl::memory bm(pd.weights_desc(), o.engine);
    dnnl::reorder(b_plain, bm).execute(stream, b_plain, bm);
    stream.wait();
    auto run = [&] {
        mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        stream.wait();
    };
    run();  // warm-up
    std::vector<double> us;
    for (int r = 0; r < std::max(1, reps); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        run();
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
}

std::string bf16_gemm_kernel() {
    // A small primitive reveals which kernel oneDNN picks on this CPU (AMX, AVX512-BF16, ...).
    OneDnn& o = onednn();
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({64, 64}, dt::bf16, dnnl::memory::dims{64, 1});
    const dnnl::memory::desc c({64, 64}, dt::f32, dnnl::memory::dims{64, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), o.engine);
    return pd.impl_info_str();
}

}  // namespace shardrec::kernels::cpu

namespace shardrec::kernels {

std::string cpu_gemm_backends() {
    const std::string kernel = cpu::bf16_gemm_kernel();
    const char* isa = kernel.find("amx") != std::string::npos    ? "AMX"
                      : kernel.find("bf16") != std::string::npos ? "AVX512-BF16, no AMX"
                                                                 : "no bf16 instructions";
    return fmt::format("f32: OpenBLAS sgemm; bf16: oneDNN {} {} ({})", cpu::onednn_version(),
                       kernel, isa);
}

}  // namespace shardrec::kernels
