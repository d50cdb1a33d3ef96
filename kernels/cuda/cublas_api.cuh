// cuBLAS and cuBLASLt through a table of the entry points shardrec calls, loaded with dlopen at
// the first GEMM on a GPU instead of linked: a CUDA build's CPU ranks never map them. Loading
// libcublasLt costs a process about 94 MB of anonymous memory (its relocations; measured with
// CUDA 13 by dlopen alone), which every CPU rank of a CUDA build used to pay at start.
// Each member has the type of the function it names (decltype), so a call is checked as before.
// Only kernels/cuda/*.cu include this header.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include "engine/core/cuda/cuda_check.h"

namespace shardrec::kernels::cuda {

// The GEMMs' C API entries, with cublasComputeType_t (C++ also sees inline overloads taking a
// cudaDataType; kernels/cuda/cublas_api.cu checks that these types name the library's).
using GemmExFn = cublasStatus_t (*)(cublasHandle_t,
                                    cublasOperation_t,
                                    cublasOperation_t,
                                    int,
                                    int,
                                    int,
                                    const void*,
                                    const void*,
                                    cudaDataType,
                                    int,
                                    const void*,
                                    cudaDataType,
                                    int,
                                    const void*,
                                    void*,
                                    cudaDataType,
                                    int,
                                    cublasComputeType_t,
                                    cublasGemmAlgo_t);
using GemmStridedBatchedExFn = cublasStatus_t (*)(cublasHandle_t,
                                                  cublasOperation_t,
                                                  cublasOperation_t,
                                                  int,
                                                  int,
                                                  int,
                                                  const void*,
                                                  const void*,
                                                  cudaDataType,
                                                  int,
                                                  long long,
                                                  const void*,
                                                  cudaDataType,
                                                  int,
                                                  long long,
                                                  const void*,
                                                  void*,
                                                  cudaDataType,
                                                  int,
                                                  long long,
                                                  int,
                                                  cublasComputeType_t,
                                                  cublasGemmAlgo_t);

struct CublasApi {
    decltype(&cublasCreate) create;  // cublasCreate_v2
    decltype(&cublasSetStream) set_stream;
    GemmExFn gemm_ex;
    GemmStridedBatchedExFn gemm_strided_batched_ex;
    decltype(&cublasGetStatusString) status_string;
    decltype(&cublasLtCreate) lt_create;
    decltype(&cublasLtMatmulDescCreate) lt_matmul_desc_create;
    decltype(&cublasLtMatmulDescDestroy) lt_matmul_desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) lt_matmul_desc_set_attribute;
    decltype(&cublasLtMatrixLayoutCreate) lt_matrix_layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) lt_matrix_layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) lt_matmul_preference_create;
    decltype(&cublasLtMatmulPreferenceDestroy) lt_matmul_preference_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) lt_matmul_preference_set_attribute;
    decltype(&cublasLtMatmulAlgoGetHeuristic) lt_matmul_algo_get_heuristic;
    decltype(&cublasLtMatmul) lt_matmul;
};

// Both libraries loaded at the first call (by soname); an Error naming the library or the
// symbol that is missing.
const CublasApi& cublas_api();

}  // namespace shardrec::kernels::cuda

#define SR_CUBLAS_CHECK(expr)                     \
    SR_CHECK_STATUS_(expr, CUBLAS_STATUS_SUCCESS, \
                     ::shardrec::kernels::cuda::cublas_api().status_string)
