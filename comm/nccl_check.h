// SR_NCCL_CHECK: an NCCL call that failed throws with NCCL's error string and, when a
// communicator is at hand, ncclGetLastError's detail (nccl-tests). Only comm/ CUDA sources
// include this header.
#pragma once

#include <nccl.h>

#include <string>

#include "engine/core/error.h"

namespace shardrec::comm {

inline std::string nccl_error_string(ncclResult_t rc, ncclComm_t comm) {
    std::string s = ncclGetErrorString(rc);
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0')
        s += std::string(": ") + last;
    return s;
}

}  // namespace shardrec::comm

#define SR_NCCL_CHECK(expr, nccl_comm)                                          \
    do {                                                                        \
        const ncclResult_t sr_nccl_rc_ = (expr);                                \
        if (sr_nccl_rc_ != ncclSuccess) {                                       \
            ::shardrec::throw_error(                                            \
                #expr, __func__, __FILE__, __LINE__,                            \
                ::shardrec::comm::nccl_error_string(sr_nccl_rc_, (nccl_comm))); \
        }                                                                       \
    } while (0)
