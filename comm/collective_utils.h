// TorchRec collective utilities (torchrec.distributed.collective_utils): run something on one rank
// and hand its result to all, tell the leader, gather one number per rank. All are blocking and
// collective over the group: every rank calls them at the same point.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace shardrec::comm {

// True on leader_rank of pg; a null pg means a single process, which is its own leader.
bool is_leader(const ProcessGroup* pg, int leader_rank = 0);

// Runs fn on `rank` only and returns its result on every rank of pg (size, then bytes, by
// broadcast). If fn throws there, every rank throws a shardrec::Error carrying its message, so no
// rank is left waiting for a result that never comes.
std::string invoke_on_rank_and_broadcast_result(ProcessGroup& pg,
                                                int rank,
                                                const std::function<std::string()>& fn);
std::vector<int64_t> invoke_on_rank_and_broadcast_result(
    ProcessGroup& pg, int rank, const std::function<std::vector<int64_t>()>& fn);

// Every rank's value, in rank order (e.g. the batch size of each rank).
std::vector<int64_t> all_gather_int64(ProcessGroup& pg, int64_t value);

}  // namespace shardrec::comm
