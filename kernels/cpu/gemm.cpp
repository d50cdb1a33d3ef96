// The CPU GEMM every dense CPU kernel calls (kernels/cpu/linear.h: sgemm): OpenBLAS sgemm in f32
// math, oneDNN's matmul on bf16 operands with f32 accumulation in bf16 math (AMX tiles where the
// CPU has them, AVX512-BF16 dot products where it has those, oneDNN's own choice otherwise).
//
// Why OpenBLAS stays the f32 backend: measured on the MLP / DCN shapes at B = 2048 and 256
// (bench/results/cpu-20261126-onednn), oneDNN 2.6's f32 matmul is within 10 % of OpenBLAS on the
// large shapes and 2.6x slower on the narrow ones (2048 x 512 -> 256), so one backend per math
// keeps f32 results what they were, bit for bit, with nothing to choose per shape.
//
// bf16: each call rounds op(A) and op(B) to bf16 (nearest even, engine/core/dtype.h) into
// thread-local buffers, except a weight its module rounded once in its forward
// (kernels::refresh_gemm_weight), and runs a matmul primitive built once per shape and kept;
// beta != 0 is a sum post-op, so bias pre-written into C (linear_forward) still costs no extra
// pass. Same math as CUDA's CUBLAS_COMPUTE_32F_FAST_16BF: bf16 products, f32 accumulation, f32
// in and out. The weights' copies are in plain row-major layout, shared by the forward (w^T) and
// the backward (w) GEMMs; oneDNN's blocked layout needs one copy per use, whose reorders cost the
// DCNv2 step more than its 2-11 % faster GEMMs save (bench/results/cpu-20261128-bf16-blocked-
// weights). On a CPU where oneDNN has no bf16 matmul (2.6 needs AVX-512, so not on AVX2-only
// x86), the same operands rounded to bf16 go through OpenBLAS sgemm: a product of two bf16
// values is exact in f32, so the math is the same (bf16 products, f32 accumulation), in sgemm's
// order and at sgemm's speed.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "kernels/cpu/linear.h"

namespace shardrec::kernels::cpu {
namespace {

int to_int(int64_t v) {
    SR_DCHECK(v >= 0 && v <= INT32_MAX, "sgemm size {} does not fit OpenBLAS's int", v);
    return static_cast<int>(v);
}

// OpenBLAS's sgemm, row-major, alpha 1: the one call every f32 path below ends in.
void blas_sgemm(Trans ta,
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
    cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
                tb == Trans::kYes ? CblasTrans : CblasNoTrans, to_int(m), to_int(n), to_int(k),
                1.0f, a, to_int(lda), b, to_int(ldb), beta, c, to_int(ldc));
}

struct OneDnn {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    std::mutex mutex;  // guards primitives; executing one needs no lock
    // ta, tb, m, n, k, lda, ldb, ldc (of the bf16 operands and f32 C), accumulate
    using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
    std::map<Key, dnnl::matmul> primitives;
};

// A GEMM under this many multiply-adds runs its bf16 matmul on the calling thread alone. Alone,
// two threads win from about 0.5M (bench/results/cpu-20261128-gemm-threads: 128 x 128 x 64 takes
// 10.5 us on one, 6.8-8.3 on two), yet a bound of 2^19 changed the quickstart's and Kaggle DLRM's
// steps by nothing that stood out of the noise in 24 pairs (between GEMMs the other thread is
// busy or asleep). A choice by shape alone, so results repeat run to run.
constexpr int64_t kMinParallelMacs = int64_t{1} << 23;

// Sets the calling thread's OpenMP thread count for a scope (oneDNN reads it when it creates
// and runs a primitive) and restores it.
class OmpThreads {
public:
    explicit OmpThreads(bool single) {
#ifdef _OPENMP
        if (single) {
            saved_ = omp_get_max_threads();
            omp_set_num_threads(1);
        }
#else
        (void)single;
#endif
    }

    ~OmpThreads() {
#ifdef _OPENMP
        if (saved_ > 0) {
            omp_set_num_threads(saved_);
        }
#endif
    }

    OmpThreads(const OmpThreads&) = delete;
    OmpThreads& operator=(const OmpThreads&) = delete;

private:
    int saved_ = 0;
};

OneDnn& onednn() {
    static OneDnn o;
    return o;
}

// The strides of op(X) [rows, cols] over the stored X with row stride ld: stored as is
// ([rows, cols]) or transposed ([cols, rows]).
dnnl::memory::dims op_strides(Trans t, int64_t ld) {
    return t == Trans::kYes ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
}

const dnnl::matmul& bf16_primitive(Trans ta,
                                   Trans tb,
                                   int64_t m,
                                   int64_t n,
                                   int64_t k,
                                   int64_t lda,
                                   int64_t ldb,
                                   int64_t ldc,
                                   bool accumulate) {
    OneDnn& o = onednn();
    const OneDnn::Key key{
        static_cast<int>(ta), static_cast<int>(tb), m, n, k, lda, ldb, ldc, accumulate};
    std::lock_guard<std::mutex> lock(o.mutex);
    auto it = o.primitives.find(key);
    if (it != o.primitives.end()) {
        return it->second;
    }
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({m, k}, dt::bf16, op_strides(ta, lda));
    const dnnl::memory::desc b({k, n}, dt::bf16, op_strides(tb, ldb));
    const dnnl::memory::desc c({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
    }
    const OmpThreads threads(m * n * k < kMinParallelMacs);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, o.engine);
    return o.primitives.emplace(key, dnnl::matmul(pd)).first->second;
}

// out[r * out_ld + c] = bf16(x[r * ld + c]), rounded to nearest even as float_to_bf16. Built for
// AVX-512 too, picked at run time: the loop is integer arithmetic GCC vectorises either way.
SR_AVX512_CLONES void round_rows_to_bf16(
    const float* x, int64_t rows, int64_t cols, int64_t ld, uint16_t* out, int64_t out_ld) {
    // Across the kernels' threads when large: rounding is memory-bound, one core cannot draw the
    // bandwidth (oneDNN's matmul runs on the same OpenMP threads, so they are not contended).
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t{1} << 18))
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * ld;
        uint16_t* orow = out + r * out_ld;
        for (int64_t c = 0; c < cols; ++c) {
            orow[c] = float_to_bf16(xr[c]).bits;
        }
    }
}

// bf16 copies of weights, refreshed by their modules' forwards (refresh_gemm_weight), and of
// operands shared by the GEMMs of one kernel (Bf16OperandScope). Keyed by the f32 buffer; an
// entry whose storage (or scope) is gone is dropped, so a new buffer at a freed one's address
// never finds its copy. A copy holds each value at its position in the f32 buffer, so a GEMM
// operand inside an entry's buffer (a slice of a weight, as the mixture cross net's experts)
// reads the copy at the same offset, with the same strides.
class Bf16Copies {
public:
    void refresh(const Tensor& w) {
        const float* base = w.data<float>();
        const auto n = static_cast<size_t>(w.numel());
        std::lock_guard<std::mutex> lock(mutex_);
        Entry* e = find_locked(base);
        if (e == nullptr || e->n != n) {
            drop_if([&](const Entry& x) { return x.base == base; });
            entries_.push_back(Entry{base, n, w.storage_token(), w.storage_token(), {}});
            e = &entries_.back();
            e->copy.resize(n);
        }
        const int64_t rows = w.dim() >= 1 ? w.size(0) : 1;
        const int64_t cols = w.numel() / std::max<int64_t>(rows, 1);
        round_rows_to_bf16(base, rows, cols, cols, e->copy.data(), cols);
    }

    void clear() {
        std::lock_guard<std::mutex> lock(mutex_);
        entries_.clear();
    }

    // A copy of [rows, cols] at x (row stride ld) that lives as long as `token` and `owner` (x's
    // storage, where the caller names it).
    void add(const float* x,
             int64_t rows,
             int64_t cols,
             int64_t ld,
             const std::shared_ptr<const void>& token,
             const std::weak_ptr<const void>& owner) {
        const auto n = static_cast<size_t>((rows - 1) * ld + cols);
        Entry e{x, n, token, owner, std::vector<uint16_t>(n)};
        round_rows_to_bf16(x, rows, cols, ld, e.copy.data(), ld);
        std::lock_guard<std::mutex> lock(mutex_);
        drop_if([&](const Entry& old) { return old.base == x; });
        entries_.push_back(std::move(e));
    }

    // The bf16 copy of the f32 operand at p spanning `extent` elements, or nullptr.
    const uint16_t* find(const float* p, int64_t extent) {
        std::lock_guard<std::mutex> lock(mutex_);
        drop_if([](const Entry& x) { return x.storage.expired() || x.owner.expired(); });
        for (const Entry& e : entries_) {
            if (p >= e.base && p + extent <= e.base + e.n) {
                return e.copy.data() + (p - e.base);
            }
        }
        return nullptr;
    }

private:
    struct Entry {
        const float* base;
        size_t n;
        std::weak_ptr<const void> storage;  // the copy is dropped once either is gone
        std::weak_ptr<const void> owner;
        std::vector<uint16_t> copy;
    };

    template <typename Pred>
    void drop_if(Pred pred) {
        entries_.erase(std::remove_if(entries_.begin(), entries_.end(), pred), entries_.end());
    }

    Entry* find_locked(const float* base) {
        for (Entry& e : entries_) {
            if (e.base == base && !e.storage.expired()) {
                return &e;
            }
        }
        return nullptr;
    }

    std::mutex mutex_;
    std::vector<Entry> entries_;
};

Bf16Copies& bf16_copies() {
    static Bf16Copies w;
    return w;
}

// A bf16 view of the stored [rows, cols] f32 operand with row stride ld: a weight's refreshed
// copy (same ld), else a tight copy rounded now into `scratch` (ld = cols).
const uint16_t* bf16_operand(
    const float* x, int64_t rows, int64_t cols, int64_t& ld, std::vector<uint16_t>& scratch) {
    if (const uint16_t* copy = bf16_copies().find(x, (rows - 1) * ld + cols)) {
        return copy;
    }
    scratch.resize(static_cast<size_t>(rows * cols));
    round_rows_to_bf16(x, rows, cols, ld, scratch.data(), cols);
    ld = cols;
    return scratch.data();
}

// OpenBLAS sgemm on the bf16 operands widened back to f32 (exactly): bf16 math where oneDNN
// has no bf16 matmul.
void widened_bf16_gemm(Trans ta,
                       Trans tb,
                       int64_t m,
                       int64_t n,
                       int64_t k,
                       const uint16_t* a16,
                       int64_t lda,
                       const uint16_t* b16,
                       int64_t ldb,
                       float beta,
                       float* c,
                       int64_t ldc) {
    thread_local std::vector<float> a32, b32;
    const auto widen = [](const uint16_t* x, int64_t rows, int64_t cols, int64_t ld,
                          std::vector<float>& out) {
        out.resize(static_cast<size_t>((rows - 1) * ld + cols));
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t col = 0; col < cols; ++col) {
                out[static_cast<size_t>(r * ld + col)] = bf16_to_float(BFloat16{x[r * ld + col]});
            }
        }
        return out.data();
    };
    const float* a = widen(a16, ta == Trans::kYes ? k : m, ta == Trans::kYes ? m : k, lda, a32);
    const float* b = widen(b16, tb == Trans::kYes ? n : k, tb == Trans::kYes ? k : n, ldb, b32);
    blas_sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
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
    thread_local std::vector<uint16_t> a_scratch, b_scratch;
    // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
    const uint16_t* a16 =
        bf16_operand(a, ta == Trans::kYes ? k : m, ta == Trans::kYes ? m : k, lda, a_scratch);
    const uint16_t* b16 =
        bf16_operand(b, tb == Trans::kYes ? n : k, tb == Trans::kYes ? k : n, ldb, b_scratch);
    if (!onednn_bf16_available()) {
        return widened_bf16_gemm(ta, tb, m, n, k, a16, lda, b16, ldb, beta, c, ldc);
    }
    thread_local dnnl::stream stream(onednn().engine);
    const dnnl::matmul& mm = bf16_primitive(ta, tb, m, n, k, lda, ldb, ldc, beta != 0.0f);
    using dt = dnnl::memory::data_type;
    const auto& e = onednn().engine;
    // oneDNN reads through non-const handles; these operands are only read.
    dnnl::memory am({{m, k}, dt::bf16, op_strides(ta, lda)}, e, const_cast<uint16_t*>(a16));
    dnnl::memory bm({{k, n}, dt::bf16, op_strides(tb, ldb)}, e, const_cast<uint16_t*>(b16));
    dnnl::memory cm({{m, n}, dt::f32, dnnl::memory::dims{ldc, 1}}, e, c);
    const OmpThreads threads(m * n * k < kMinParallelMacs);
    mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
}

}  // namespace

Bf16OperandScope::Bf16OperandScope(const float* x, int64_t rows, int64_t cols, int64_t ld) {
    if (gemm_math() != GemmMath::kBf16 || rows < 1 || cols < 1) {
        return;
    }
    token_ = std::make_shared<int>(0);
    bf16_copies().add(x, rows, cols, ld, token_, token_);
}

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
    if (ta == Trans::kNo && row_invariant_gemms()) {
        return ordered_sgemm(tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    }
    blas_sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
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
    // A small primitive reveals which kernel oneDNN picks on this CPU (AMX, AVX512-BF16, ...);
    // where it has none, creating it throws.
    static const std::string kernel = [] {
        OneDnn& o = onednn();
        using dt = dnnl::memory::data_type;
        const dnnl::memory::desc a({64, 64}, dt::bf16, dnnl::memory::dims{64, 1});
        const dnnl::memory::desc c({64, 64}, dt::f32, dnnl::memory::dims{64, 1});
        try {
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), o.engine);
            return std::string(pd.impl_info_str());
        } catch (const dnnl::error&) {
            return std::string();
        }
    }();
    return kernel;
}

bool onednn_bf16_available() {
    return !bf16_gemm_kernel().empty();
}

}  // namespace shardrec::kernels::cpu

namespace shardrec::kernels {

std::string cpu_gemm_backends() {
    const std::string kernel = cpu::bf16_gemm_kernel();
    if (kernel.empty()) {
        return fmt::format(
            "f32: OpenBLAS sgemm ({} threads); bf16: OpenBLAS sgemm on bf16-rounded operands "
            "(oneDNN {} has no bf16 matmul on this CPU: no AVX-512)",
            blas_threading(), cpu::onednn_version());
    }
    const char* isa = kernel.find("amx") != std::string::npos    ? "AMX"
                      : kernel.find("bf16") != std::string::npos ? "AVX512-BF16, no AMX"
                                                                 : "no bf16 instructions";
    return fmt::format("f32: OpenBLAS sgemm ({} threads); bf16: oneDNN {} {} ({})",
                       blas_threading(), cpu::onednn_version(), kernel, isa);
}

std::string cpu_loop_build() {
    // The test the resolver of every SR_AVX512_CLONES function makes.
    return __builtin_cpu_supports("avx512f") ? "AVX-512 (avx512f)" : "baseline x86-64 (no AVX-512)";
}

}  // namespace shardrec::kernels

namespace shardrec::kernels {

void drop_gemm_weight_copies() {
    cpu::bf16_copies().clear();
}

Bf16ActivationCopy::Bf16ActivationCopy(const Tensor& x) {
    if (gemm_math() != GemmMath::kBf16 || !x.device().is_cpu() || x.dim() != 2 || x.numel() == 0) {
        return;
    }
    SR_CHECK(x.dtype() == DType::kF32, "Bf16ActivationCopy: {} must be f32", x.str());
    token_ = std::make_shared<int>(0);
    cpu::bf16_copies().add(x.data<float>(), x.size(0), x.size(1), x.size(1), token_,
                           x.storage_token());
}

void refresh_gemm_weight(const Tensor& w) {
    if (gemm_math() != GemmMath::kBf16 || !w.device().is_cpu()) {
        return;
    }
    SR_CHECK(w.dtype() == DType::kF32, "refresh_gemm_weight: {} must be f32", w.str());
    cpu::bf16_copies().refresh(w);
}

}  // namespace shardrec::kernels
