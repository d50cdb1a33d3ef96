// SR_MPI_CHECK: an MPI call that failed throws with MPI's own error string. Meaningful only because
// init_process sets MPI_ERRORS_RETURN on every communicator (STYLE.md R4).
#pragma once

#include <mpi.h>

#include "engine/core/error.h"

namespace shardrec::comm {
std::string mpi_error_string(int code);
}  // namespace shardrec::comm

#define SR_MPI_CHECK(expr)                                                           \
    do {                                                                             \
        const int sr_mpi_rc_ = (expr);                                               \
        if (sr_mpi_rc_ != MPI_SUCCESS) {                                             \
            ::shardrec::throw_error(#expr, __func__, __FILE__, __LINE__,             \
                                    ::shardrec::comm::mpi_error_string(sr_mpi_rc_)); \
        }                                                                            \
    } while (0)
