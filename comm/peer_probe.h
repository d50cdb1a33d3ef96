// Who did not arrive. MPI cannot say which peer a pending collective waits for, so every rank runs
// a small TCP service (a thread that needs no MPI) that tells the ranks of its job where it
// stands: the collective it waits in and for how long, or how long ago it left its last one. A
// wait that times out, or that a stop signal interrupts, asks its group's peers, and the answers
// tell apart a peer that computes outside communication, one that waits in another collective,
// one whose process is gone (its host refuses the connection) and one that cannot be reached (a
// host or link down, a stopped process). No MPI call is made, so the probes work while Open MPI
// holds the waiting thread (it warns of a dead peer's refused connections from inside its
// progress loop). As the bootstraps of NCCL and torch.distributed do, each rank listens on an
// ephemeral port of every address; the ports, the hosts' IPv4 addresses and a job token are
// exchanged once by init_process, and only a query that carries the token is answered.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace shardrec::comm {

// "all_reduce #12 of group 'world'": a wait as the probes and the messages name it.
std::string wait_name(const char* collective, int64_t sequence, const std::string& group);

// The wait in progress on this rank, for the probe service and the wait watchdog, set for the
// guard's lifetime (waits do not nest: the collectives run on one thread at a time). `group` and
// `world_ranks` must outlive the guard; past timeout_s (0: never) the wait watchdog may end it.
class WaitingIn {
public:
    WaitingIn(const char* collective,
              const std::string& group,
              int64_t sequence,
              const std::vector<int>& world_ranks,
              double timeout_s);
    ~WaitingIn();
    WaitingIn(const WaitingIn&) = delete;
    WaitingIn& operator=(const WaitingIn&) = delete;
};

// The wait in progress, once it has lasted min_s or longer; each wait is claimed once.
struct LongWait {
    std::string what;
    double waited_s = 0;
    double timeout_s = 0;
    std::vector<int> world_ranks;
};

std::optional<LongWait> claim_long_wait(double min_s);

// The wait in progress, once it has lasted margin_s past its timeout: its thread, which fails the
// wait at the timeout, is held elsewhere (inside MPI). Each wait is claimed once.
std::optional<LongWait> claim_overdue_wait(double margin_s);

// Starts this rank's probe service and exchanges the addresses: collective over MPI_COMM_WORLD,
// called once by init_process (nothing to do for one rank).
void start_peer_probe_service();

// Asks every rank of world_ranks but this one where it is, for up to grace_s seconds, and
// describes the ones that are not waiting in `what` (this rank's wait): "rank 1 on host h has not
// reached it (it computes: its last collective, barrier #3 of group 'world', ended 2.1 s ago)",
// "rank 2 on host h waits in barrier #3 of group 'other' instead", "rank 3 on host h has not
// reached it (its process is gone: host h refused the connection)". `completed`, when given, is
// polled meanwhile: once it is true the wait is over and there is nothing to describe (nullopt).
// Callable from any thread.
std::optional<std::string> describe_missing_peers(const std::string& what,
                                                  const std::vector<int>& world_ranks,
                                                  double grace_s,
                                                  const std::function<bool()>& completed = {});

// A wait's timeout (0: none), its peers asked in the last tenth (up to 2 s) while the caller
// keeps polling its collective, so that the wait fails, naming them, when the timeout is up.
// `world_ranks` must outlive it.
class PeerDeadline {
public:
    PeerDeadline(double timeout_s, const std::vector<int>& world_ranks);

    // At waited_s into the wait: once the last tenth has begun, asks the peers once (polling
    // `completed` meanwhile). False when the wait completed while they were asked.
    bool ask_when_due(double waited_s,
                      const char* collective,
                      int64_t sequence,
                      const std::string& group,
                      const std::function<bool()>& completed);

    // Once the timeout is up: the peers that did not arrive, described; else nullopt.
    std::optional<std::string> expired(double waited_s) const;

private:
    double timeout_s_;
    double grace_s_;
    const std::vector<int>& world_ranks_;
    std::optional<std::string> missing_;
};

}  // namespace shardrec::comm
