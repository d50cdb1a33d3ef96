// MPI bootstrap: initialises MPI once per process, sets MPI_ERRORS_RETURN on every communicator we
// create, and tells the rank, the world size, the node-local rank (shared-memory split) and the
// host. SHARDREC_LOCAL_SIZE=K emulates nodes of K ranks on one machine.
#pragma once

#include <string>
#include <vector>

namespace shardrec::comm {

struct ProcessInfo {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;
    int local_size = 1;
    std::string host;
    std::vector<std::string> hosts;  // every rank's host, by world rank (gathered once at init)
};

// Initialises MPI (if the process has not) and the error/log context. Idempotent.
const ProcessInfo& init_process(int* argc, char*** argv);
const ProcessInfo& process_info();

// The ranks per node of a world whose ranks run on `hosts` (by world rank). shardrec's nodes are
// consecutive blocks of equal size (the planner's node groups, the intra- and cross-node
// groups): another placement (srun --distribution=cyclic, mpirun --map-by node, nodes of
// different sizes) is an error that names the host, its ranks and the launcher options that
// give block placement.
int block_local_size(const std::vector<std::string>& hosts);
void finalize_process();
[[noreturn]] void abort_process(int code);  // MPI_Abort on the world communicator

std::string mpi_library_version();

}  // namespace shardrec::comm
