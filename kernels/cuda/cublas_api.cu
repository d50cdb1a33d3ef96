// kernels/cuda/cublas_api.cuh: cuBLAS and cuBLASLt loaded on first use.
#include <dlfcn.h>

#include <atomic>
#include <string>

#include "kernels/cuda/cublas_api.cuh"
#include "kernels/linear.h"

namespace shardrec::kernels::cuda {
namespace {

// The declared C entries have exactly these types (overload resolution fails to compile else).
[[maybe_unused]] constexpr GemmExFn kGemmEx = &cublasGemmEx;
[[maybe_unused]] constexpr GemmStridedBatchedExFn kGemmStridedBatchedEx =
    &cublasGemmStridedBatchedEx;

std::atomic<bool> g_loaded{false};

// By soname: dlopen searches the executable's runpath (where the link found libcudart, the
// toolkit's lib directory), then LD_LIBRARY_PATH and the loader's cache, as the link's own
// libraries are found.
void* open_library(const std::string& name) {
    void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    SR_CHECK(h != nullptr,
             "cannot load {} for the GPU's GEMMs: {} (is the CUDA toolkit's lib directory "
             "on LD_LIBRARY_PATH?)",
             name, ::dlerror());
    return h;
}

template <typename Fn>
void resolve(void* library, const std::string& library_name, const char* symbol, Fn& out) {
    out = reinterpret_cast<Fn>(::dlsym(library, symbol));
    SR_CHECK(out != nullptr,
             "{} has no {}: a cuBLAS older than the headers shardrec was built "
             "with ({}.{})",
             library_name, symbol, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);
}

// The exported name after the headers' macros (cublasCreate is cublasCreate_v2).
#define SR_SYMBOL_(name) #name
#define SR_SYMBOL(name) SR_SYMBOL_(name)
#define SR_RESOLVE(lib, name, member) resolve(lib, lib##_name, SR_SYMBOL(name), api.member)

CublasApi load() {
    const std::string major = std::to_string(CUBLAS_VER_MAJOR);
    const std::string blas_name = "libcublas.so." + major, lt_name = "libcublasLt.so." + major;
    void* blas = open_library(blas_name);
    void* lt = open_library(lt_name);
    CublasApi api{};
    SR_RESOLVE(blas, cublasCreate, create);
    SR_RESOLVE(blas, cublasSetStream, set_stream);
    SR_RESOLVE(blas, cublasGemmEx, gemm_ex);
    SR_RESOLVE(blas, cublasGemmStridedBatchedEx, gemm_strided_batched_ex);
    SR_RESOLVE(blas, cublasGetStatusString, status_string);
    SR_RESOLVE(lt, cublasLtCreate, lt_create);
    SR_RESOLVE(lt, cublasLtMatmulDescCreate, lt_matmul_desc_create);
    SR_RESOLVE(lt, cublasLtMatmulDescDestroy, lt_matmul_desc_destroy);
    SR_RESOLVE(lt, cublasLtMatmulDescSetAttribute, lt_matmul_desc_set_attribute);
    SR_RESOLVE(lt, cublasLtMatrixLayoutCreate, lt_matrix_layout_create);
    SR_RESOLVE(lt, cublasLtMatrixLayoutDestroy, lt_matrix_layout_destroy);
    SR_RESOLVE(lt, cublasLtMatmulPreferenceCreate, lt_matmul_preference_create);
    SR_RESOLVE(lt, cublasLtMatmulPreferenceDestroy, lt_matmul_preference_destroy);
    SR_RESOLVE(lt, cublasLtMatmulPreferenceSetAttribute, lt_matmul_preference_set_attribute);
    SR_RESOLVE(lt, cublasLtMatmulAlgoGetHeuristic, lt_matmul_algo_get_heuristic);
    SR_RESOLVE(lt, cublasLtMatmul, lt_matmul);
    g_loaded.store(true);
    return api;
}

}  // namespace

const CublasApi& cublas_api() {
    static const CublasApi api = load();  // thread-safe once; a failed load throws every call
    return api;
}

bool cublas_loaded() {
    return g_loaded.load();
}

int load_cublas() {
    (void)cublas_api();
    return static_cast<int>(sizeof(CublasApi) / sizeof(void*));
}

}  // namespace shardrec::kernels::cuda
