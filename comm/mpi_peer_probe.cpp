// The probe protocol on comm::probe_comm (world ranks): a query carries the asker's query id
// (int64, tag kQueryTag); the answer is "ID|WHAT" (chars, tag kAnswerTag), WHAT being the wait
// the peer polls in. Ids tell a late answer to an earlier probe from the current one.
#include "comm/mpi_peer_probe.h"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <deque>
#include <map>
#include <thread>

#include "comm/mpi_check.h"
#include "comm/mpi_env.h"

namespace shardrec::comm {
namespace {

constexpr int kQueryTag = 1;
constexpr int kAnswerTag = 2;

std::string g_waiting_in;  // empty: not in a wait
int64_t g_next_query = 0;

// Sends in flight with their buffers; completed ones are dropped on the next send. A send to a
// stalled peer may never complete, and that is fine: the run is ending.
struct PendingSend {
    MPI_Request request = MPI_REQUEST_NULL;
    std::string payload;
};

std::deque<PendingSend> g_sends;

void send(std::string payload, int dest, int tag) {
    while (!g_sends.empty()) {
        int done = 0;
        MPI_Test(&g_sends.front().request, &done, MPI_STATUS_IGNORE);
        if (!done) {
            break;
        }
        g_sends.pop_front();
    }
    g_sends.push_back(PendingSend{MPI_REQUEST_NULL, std::move(payload)});
    PendingSend& s = g_sends.back();
    MPI_Isend(s.payload.data(), static_cast<int>(s.payload.size()), MPI_CHAR, dest, tag,
              probe_comm(), &s.request);
}

// The next message with `tag` that has arrived, from any rank; false when none.
bool receive(int tag, int& source, std::string& payload) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, tag, probe_comm(), &flag, &status) != MPI_SUCCESS || !flag) {
        return false;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    payload.assign(static_cast<size_t>(count), '\0');
    source = status.MPI_SOURCE;
    return MPI_Recv(payload.data(), count, MPI_CHAR, source, tag, probe_comm(),
                    MPI_STATUS_IGNORE) == MPI_SUCCESS;
}

std::string host_of(int world_rank) {
    const auto& hosts = process_info().hosts;
    return world_rank >= 0 && static_cast<size_t>(world_rank) < hosts.size()
               ? hosts[static_cast<size_t>(world_rank)]
               : std::string("?");
}

}  // namespace

WaitingIn::WaitingIn(std::string what) {
    g_waiting_in = std::move(what);
}

WaitingIn::~WaitingIn() {
    g_waiting_in.clear();
}

void answer_peer_probes() {
    if (probe_comm() == MPI_COMM_NULL) {
        return;
    }
    int source = 0;
    std::string query;
    while (receive(kQueryTag, source, query)) {
        send(query + "|" + g_waiting_in, source, kAnswerTag);
    }
}

std::optional<std::string> describe_missing_peers(const std::string& what,
                                                  const std::vector<int>& world_ranks,
                                                  double grace_s,
                                                  const std::function<bool()>& completed) {
    if (probe_comm() == MPI_COMM_NULL) {
        return std::string();
    }
    const int me = process_info().rank;
    const std::string id = std::to_string(g_next_query++);
    size_t peers = 0;
    for (const int r : world_ranks) {
        if (r != me) {
            send(id, r, kQueryTag);
            ++peers;
        }
    }
    std::map<int, std::string> answers;  // world rank -> where it waits
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (answers.size() < peers && std::chrono::steady_clock::now() < deadline) {
        if (completed && completed()) {
            return std::nullopt;
        }
        answer_peer_probes();  // peers that timed out too ask this rank meanwhile
        int source = 0;
        std::string answer;
        while (receive(kAnswerTag, source, answer)) {
            const size_t bar = answer.find('|');
            if (bar != std::string::npos && answer.compare(0, bar, id) == 0) {
                answers[source] = answer.substr(bar + 1);
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::string out;
    for (const int r : world_ranks) {
        if (r == me) {
            continue;
        }
        const auto it = answers.find(r);
        std::string line;
        if (it == answers.end()) {
            line = fmt::format(
                "rank {} on host {} has not reached it (no answer within {:.2g} s: it stalls, "
                "died or computes outside communication)",
                r, host_of(r), grace_s);
        } else if (it->second.empty()) {
            line = fmt::format("rank {} on host {} answered outside any wait", r, host_of(r));
        } else if (it->second != what) {
            line = fmt::format("rank {} on host {} waits in {} instead", r, host_of(r), it->second);
        }
        if (!line.empty()) {
            out += (out.empty() ? "" : "; ") + line;
        }
    }
    return out.empty() ? fmt::format("every rank of the group is waiting in {} too", what) : out;
}

}  // namespace shardrec::comm
