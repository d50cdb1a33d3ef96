// `shardrec --version`: the version and commit, the backends built in, and the versions of the
// libraries that decide performance (BLAS, MPI, NCCL), so a benchmark log says what it ran on.
#include "engine/core/version.h"

#include <cblas.h>
#include <fmt/format.h>

#include <string>

#include "comm/mpi_env.h"
#include "kernels/linear.h"
#include "tools/cli.h"

// NCCL is linked when the comm layer builds its NCCL backend; it then defines SHARDREC_WITH_NCCL.
#if defined(SHARDREC_WITH_NCCL) && SHARDREC_WITH_NCCL
#include <nccl.h>
#endif

namespace shardrec::cli {
namespace {

std::string first_line(const std::string& s) {
    const size_t end = s.find_first_of("\r\n");
    std::string line = end == std::string::npos ? s : s.substr(0, end);
    while (!line.empty() && (line.back() == ' ' || line.back() == ',')) {
        line.pop_back();
    }
    return line;
}

std::string backends() {
#if SHARDREC_WITH_CUDA
    return "cpu cuda";
#else
    return "cpu";
#endif
}

std::string nccl_version() {
#if defined(SHARDREC_WITH_NCCL) && SHARDREC_WITH_NCCL
    int code = 0;
    if (ncclGetVersion(&code) != ncclSuccess) {
        return "unknown";
    }
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    return fmt::format("{}.{}.{}", code / 10000, (code / 100) % 100, code % 100);
#else
    return "not built";
#endif
}

}  // namespace

int version_main() {
    if (comm::process_info().rank != 0) {
        return 0;
    }
    fmt::print("shardrec {} (commit {})\n", version(), git_commit());
    fmt::print("backends: {}\n", backends());
    fmt::print("blas:     {}\n", first_line(openblas_get_config()));
    fmt::print("gemm:     {}\n", kernels::cpu_gemm_backends());
    fmt::print("loops:    {}\n", kernels::cpu_loop_build());
    fmt::print("mpi:      {}\n", first_line(comm::mpi_library_version()));
    fmt::print("nccl:     {}\n", nccl_version());
    return 0;
}

}  // namespace shardrec::cli
