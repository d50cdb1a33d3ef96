// Catch2 main for the GPU tests under mpirun: exits 77 (CTest "not run") on every rank when any
// rank sees no GPU (with SHARDREC_GPU_PER_RANK, as NCCL needs: when a node has fewer GPUs than
// ranks), so a machine without one never reports them as passed. Otherwise every rank runs every
// test and the pass/fail result is allreduced, as in catch_mpi_main.cpp.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>

#include "comm/mpi_env.h"
#include "engine/core/cuda/cuda_runtime_api.h"

int main(int argc, char** argv) {
    shardrec::comm::init_process(&argc, &argv);
    int devices = shardrec::cuda::device_count();
    int min_devices = 0;
    MPI_Allreduce(&devices, &min_devices, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    const int local_size = shardrec::comm::process_info().local_size;
#ifdef SHARDREC_GPU_PER_RANK
    // NCCL needs a GPU per rank: two ranks on one device fail in ncclCommInitRank.
    const bool enough = min_devices > 0 && local_size <= min_devices;
#else
    const bool enough = min_devices > 0;
#endif
    if (!enough) {
        if (shardrec::comm::process_info().rank == 0)
            std::fprintf(stderr, "%d CUDA device(s) for %d ranks per node: not run\n", min_devices,
                         local_size);
        shardrec::comm::finalize_process();
        return 77;
    }
    int failed = 0;
    try {
        failed = Catch::Session().run(argc, argv) != 0 ? 1 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        failed = 1;
    }
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    shardrec::comm::finalize_process();
    return any_failed;
}
