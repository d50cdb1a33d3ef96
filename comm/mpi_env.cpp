#include "comm/mpi_env.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "comm/mpi_check.h"
#include "comm/peer_probe.h"
#include "engine/core/log.h"

namespace shardrec::comm {
namespace {

ProcessInfo g_info;
bool g_initialised_here = false;

}  // namespace

std::string mpi_error_string(int code) {
    char buf[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, buf, &len);
    return std::string(buf, static_cast<size_t>(len));
}

const ProcessInfo& init_process(int* argc, char*** argv) {
    // A write to a dead peer's socket (Open MPI's TCP transport, the peer probes) is an error to
    // report, not a reason to die: by default SIGPIPE ends the process silently, and a rank
    // sending to a killed host was ended so before it could say where it waited.
    signal(SIGPIPE, SIG_IGN);
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
        int provided = 0;
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        g_initialised_here = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    SR_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_info.rank));
    SR_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_info.world_size));

    char host[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    SR_MPI_CHECK(MPI_Get_processor_name(host, &len));
    g_info.host.assign(host, static_cast<size_t>(len));
    // From here an error names this rank (the node checks below fail on every rank).
    set_error_context(g_info.rank, g_info.world_size, g_info.host);
    // Every host once, so that a timeout can name the host of the rank that did not arrive.
    std::vector<char> hosts(static_cast<size_t>(g_info.world_size) * MPI_MAX_PROCESSOR_NAME);
    std::fill(host + len, host + MPI_MAX_PROCESSOR_NAME, '\0');
    SR_MPI_CHECK(MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(),
                               MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD));
    g_info.hosts.clear();
    for (int r = 0; r < g_info.world_size; ++r) {
        g_info.hosts.emplace_back(hosts.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    }

    MPI_Comm local;
    SR_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_info.rank,
                                     MPI_INFO_NULL, &local));
    MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN);
    SR_MPI_CHECK(MPI_Comm_rank(local, &g_info.local_rank));
    SR_MPI_CHECK(MPI_Comm_size(local, &g_info.local_size));
    MPI_Comm_free(&local);
    // Tests emulate several nodes on one machine: consecutive blocks of K ranks form a "node".
    if (std::getenv("SHARDREC_LOCAL_SIZE") == nullptr) {
        (void)block_local_size(g_info.hosts);  // every rank sees the same hosts: all fail alike
    }
    if (const char* k = std::getenv("SHARDREC_LOCAL_SIZE")) {
        const int local_size = std::atoi(k);
        SR_CHECK(local_size > 0 && g_info.world_size % local_size == 0,
                 "SHARDREC_LOCAL_SIZE={} must divide the world size {}", k, g_info.world_size);
        g_info.local_size = local_size;
        g_info.local_rank = g_info.rank % local_size;
    }

    set_error_context(g_info.rank, g_info.world_size, g_info.host);
    log::init(g_info.rank, g_info.world_size, g_info.host);
    start_peer_probe_service();  // so that a timed-out collective can say who did not arrive
    return g_info;
}

int block_local_size(const std::vector<std::string>& hosts) {
    SR_CHECK(!hosts.empty(), "no ranks");
    std::map<std::string, size_t> count;
    for (const std::string& h : hosts)
        ++count[h];
    const size_t block = count[hosts[0]];
    for (size_t r = 0; r < hosts.size(); ++r) {
        // Rank r's block starts at r - r % block and holds only its host, which has no others.
        if (hosts[r] == hosts[r - r % block] && count[hosts[r]] == block)
            continue;
        std::string ranks;
        for (size_t q = 0; q < hosts.size(); ++q) {
            if (hosts[q] == hosts[r])
                ranks += (ranks.empty() ? "" : ", ") + std::to_string(q);
        }
        SR_CHECK(false,
                 "the ranks of host {} are {}: shardrec needs each node's ranks consecutive and "
                 "as many on every node ({} on {}); launch with srun --distribution=block or "
                 "mpirun --map-by slot and the same number of tasks per node",
                 hosts[r], ranks, block, hosts[0]);
    }
    return static_cast<int>(block);
}

const ProcessInfo& process_info() {
    return g_info;
}

void finalize_process() {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (g_initialised_here && !finalised)
        MPI_Finalize();
}

void abort_process(int code) {
    // MPI_Abort tells the launcher within milliseconds, but can then stay blocked while the
    // launcher ends the job (with a host cut off, one of the two aborting ranks on mpirun's host
    // ended a second after the other, at the launcher's SIGKILL). So the process ends itself
    // shortly after; a launcher that sees an exit without MPI_Finalize ends the job all the same.
    std::thread([code] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::_Exit(code);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
}

std::string mpi_library_version() {
    char buf[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(buf, &len);
    std::string s(buf, static_cast<size_t>(len));
    const auto nl = s.find_first_of("\n,");
    return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace shardrec::comm
