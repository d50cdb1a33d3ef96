// SR_CUDA_CHECK / SR_CUDA_WARN (STYLE.md R4; SR_CUBLAS_CHECK: kernels/cuda/cublas_api.cuh). Only
// CUDA translation units include this header. SHARDREC_SYNC_CHECK=1 makes SR_CUDA_LAUNCH_CHECK
// synchronise after every launch so an asynchronous fault is reported at the launch that caused it.
#pragma once

#include <cuda_runtime.h>

#include "engine/core/error.h"
#include "engine/core/log.h"

namespace shardrec::cuda {
bool sync_check_enabled();
}

#define SR_CHECK_STATUS_(expr, success, to_string)                                                 \
    do {                                                                                           \
        const auto sr_status_ = (expr);                                                            \
        if (sr_status_ != (success)) {                                                             \
            int sr_dev_ = -1;                                                                      \
            cudaGetDevice(&sr_dev_);                                                               \
            ::shardrec::throw_error(#expr, __func__, __FILE__, __LINE__,                           \
                                    ::fmt::format("cuda:{}: {}", sr_dev_, to_string(sr_status_))); \
        }                                                                                          \
    } while (0)

#define SR_CUDA_CHECK(expr) SR_CHECK_STATUS_(expr, cudaSuccess, cudaGetErrorString)

#define SR_CUDA_LAUNCH_CHECK(stream)                      \
    do {                                                  \
        SR_CUDA_CHECK(cudaGetLastError());                \
        if (::shardrec::cuda::sync_check_enabled()) {     \
            SR_CUDA_CHECK(cudaStreamSynchronize(stream)); \
        }                                                 \
    } while (0)

// Destructors only: logs and never throws.
#define SR_CUDA_WARN(expr)                                                                \
    do {                                                                                  \
        const cudaError_t sr_err_ = (expr);                                               \
        if (sr_err_ != cudaSuccess) {                                                     \
            ::shardrec::log::all().warn("{} failed: {} ({}:{})", #expr,                   \
                                        cudaGetErrorString(sr_err_), __FILE__, __LINE__); \
        }                                                                                 \
    } while (0)
