// MpiProcessGroup: the ProcessGroup of host tensors over one MPI communicator, built on MPI's
// non-blocking collectives (MPI_Ialltoallv, MPI_Iallreduce, ...). A Work owns the MPI requests
// and completes them by polling MPI_Test against a deadline (SHARDREC_COMM_TIMEOUT_S), so a dead
// or diverged peer gives an error instead of a hang. MPI counts are int: larger collectives are
// chunked (all_reduce, broadcast) or moved in blocks of a derived contiguous type (all_to_all_v,
// all_gather_v); what still does not fit throws, naming the collective. MPI runs at
// MPI_THREAD_FUNNELED: post and wait from the thread that called comm::init_process.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace shardrec::comm {

// SHARDREC_COMM_TIMEOUT_S: seconds a wait() may take before it throws; 0 waits forever. When it
// is unset, `fallback` (runtime.comm_timeout_s in a run): the environment wins, as with
// SHARDREC_LOG_LEVEL, so a stuck job can be given a short limit without editing its config.
constexpr double kDefaultCommTimeoutS = 600.0;
double comm_timeout_s_from_env(double fallback = kDefaultCommTimeoutS);

// The first error of a group's collectives (a timeout, a failed MPI call), shared by the group and
// every group split from it: after it nothing waits on them again, and later collectives and
// waits throw it at once. An unwinding rank thus ends within one timeout instead of one more per
// dropped Work, and a second collective is never posted on a communicator whose peers are out of
// step.
struct GroupFailure {
    std::string error;  // empty: no failure
};

class MpiProcessGroup final : public ProcessGroup {
public:
    // Takes ownership of comm (freed in the destructor while MPI is still initialised) and sets
    // MPI_ERRORS_RETURN on it.
    MpiProcessGroup(MPI_Comm comm, std::string name, double timeout_s);
    ~MpiProcessGroup() override;
    MpiProcessGroup(const MpiProcessGroup&) = delete;
    MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

    // A group over a dup of MPI_COMM_WORLD (collective over the world), named "world".
    static std::shared_ptr<MpiProcessGroup> create_world();

    MPI_Comm comm() const { return comm_; }

    double timeout_s() const { return timeout_s_; }

    void set_timeout_s(double timeout_s) { timeout_s_ = timeout_s; }

    // The largest count handed to one MPI call: INT_MAX. Tests lower it to drive the chunked and
    // blocked paths with small tensors. Sub-groups made by split() inherit it and the timeout.
    int64_t max_count() const { return max_count_; }

    void set_max_count(int64_t max_count);

    // Non-empty once a collective of this group (or of its parent or sub-groups) failed.
    const std::string& failure() const { return failure_->error; }

    const std::shared_ptr<GroupFailure>& failure_state() const { return failure_; }

    // The world rank of each group rank (for messages and the peer probes of a timed-out wait).
    const std::shared_ptr<const std::vector<int>>& world_ranks() const { return world_ranks_; }

    // 1, 2, ...: the number of the collective being posted, the same on every rank of the group
    // (every rank calls the group's collectives in the same order).
    int64_t next_sequence() const { return ++posted_; }

    Work all_to_all_v(const Tensor& input,
                      const std::vector<int64_t>& input_splits,
                      Tensor& output,
                      const std::vector<int64_t>& output_splits) override;
    Work all_reduce(Tensor& tensor, ReduceOp op) override;
    Work reduce_scatter_v(const Tensor& input,
                          const std::vector<int64_t>& input_splits,
                          Tensor& output,
                          ReduceOp op) override;
    Work all_gather_v(const Tensor& input,
                      Tensor& output,
                      const std::vector<int64_t>& output_splits) override;
    Work broadcast(Tensor& tensor, int root) override;
    Work barrier() override;

    std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;

private:
    MPI_Comm comm_;
    double timeout_s_;
    int64_t max_count_;
    std::shared_ptr<GroupFailure> failure_ = std::make_shared<GroupFailure>();
    std::shared_ptr<const std::vector<int>> world_ranks_;
    mutable int64_t posted_ = 0;
};

namespace detail {

// Counts and displacements (prefix sums) of a vector collective in units of `block` elements.
// block is 1 while every count and displacement fits in max_count; beyond that it is gcd(splits),
// halved while it exceeds max_count itself, and the peer's side may pick another block (MPI
// matches type signatures, not types). Throws naming `collective` when even that does not fit.
struct MpiBlockedSplits {
    int64_t block = 1;
    std::vector<int> counts;
    std::vector<int> displs;
};

MpiBlockedSplits mpi_blocked_splits(const char* collective,
                                    const std::vector<int64_t>& splits,
                                    int64_t max_count);

}  // namespace detail

}  // namespace shardrec::comm
