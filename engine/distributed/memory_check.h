// The memory check a run makes before it allocates (the trainer, `shardrec validate`): each
// rank's planned bytes, from the planner's cost model, against what the process can get. A plan
// that cannot fit is refused with one message naming the rank, the bytes needed and available,
// the largest tables and the batch size, instead of an allocation failing (or the kernel's OOM
// killer striking) halfway through building the model.
//
// Host memory: the ranks of a node (consecutive blocks of local_size ranks, as the topology
// assumes) share MemAvailable and the cgroup, so a rank fits when its bytes plus its node-mates'
// fit those; RLIMIT_AS is per process. CUDA: the device's free memory, per rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/device.h"
#include "engine/core/memory_limits.h"

namespace shardrec {

struct TableBytes {
    std::string name;
    double bytes = 0;
};

// What one rank plans to hold, in bytes (double: a 1e12-row table must be reported, not overflow).
struct RankMemory {
    std::vector<TableBytes> tables;  // rows and optimizer state of its shards, largest first
    double tables_bytes = 0;
    double buffers_bytes = 0;  // ids received, pooled rows and their gradients (all-to-all)
    double dense_bytes = 0;    // dense parameters, gradients, optimizer state, activations
    // The managed-collision buckets it keeps (host memory: the slot maps; CPU runs only).
    double remap_bytes = 0;

    double total_bytes() const { return tables_bytes + buffers_bytes + dense_bytes + remap_bytes; }
};

// Every rank's planned memory: one process holds every table whole; several ranks shard them by
// make_sharding_plan over the topology a run resolves (local_size ranks per node).
std::vector<RankMemory> plan_rank_memory(const Config& config, int world_size, int local_size);

// The refusal for `rank`, or "" when it fits. `shared` is what the node's ranks share (host:
// MemAvailable, cgroup; bytes -1 when none), `own` what this process alone may take (RLIMIT_AS,
// or a GPU's free memory). Pure, for tests.
std::string memory_problem(const std::vector<RankMemory>& ranks,
                           int rank,
                           int local_size,
                           const AvailableMemory& shared,
                           const AvailableMemory& own,
                           int64_t batch_size);

// Throws Error with memory_problem's message when `rank` cannot fit on `device` (a CUDA device
// that is not visible here, as in `validate` on a login node: the topology's HBM per GPU).
void check_memory_fits(
    const Config& config, int world_size, int local_size, int rank, Device device);

}  // namespace shardrec
