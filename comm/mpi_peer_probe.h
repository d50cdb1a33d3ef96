// Who did not arrive: MPI cannot say which peer a pending collective waits for, so a wait that
// times out asks its group's peers on a side communicator (comm::probe_comm) where they are. A
// rank answers while it polls in a wait of its own (MpiWork::wait), with the collective it waits
// in; a rank that stalls, died or computes outside communication does not answer. Nothing is
// sent unless a wait has timed out, so collectives that complete pay one MPI_Iprobe per sleep of
// a slow wait and nothing else.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace shardrec::comm {

// What this rank waits in, while a wait polls: "all_reduce #12 of group 'world'". Set for the
// guard's lifetime (waits do not nest: MPI runs at MPI_THREAD_FUNNELED).
class WaitingIn {
public:
    explicit WaitingIn(std::string what);
    ~WaitingIn();
    WaitingIn(const WaitingIn&) = delete;
    WaitingIn& operator=(const WaitingIn&) = delete;
};

// Answers the peers' probes that have arrived (never blocks).
void answer_peer_probes();

// Asks every rank of world_ranks but this one where it waits, for up to grace_s seconds, and
// describes the ones that are not in `what` (this rank's wait, as given to WaitingIn): "rank 1
// on host h has not reached it (...)", "rank 2 on host h waits in barrier #3 of group 'world'".
// `completed`, when given, is polled meanwhile: once it is true the wait is over and there is
// nothing to describe (nullopt).
std::optional<std::string> describe_missing_peers(const std::string& what,
                                                  const std::vector<int>& world_ranks,
                                                  double grace_s,
                                                  const std::function<bool()>& completed = {});

}  // namespace shardrec::comm
