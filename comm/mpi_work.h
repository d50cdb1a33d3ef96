// MpiWork: the Work of one collective's non-blocking MPI requests. It owns what MPI reads or
// writes until completion (count arrays, tensor handles), runs a completion step once (kAvg's
// division), and completes by polling MPI_Testall against the group's deadline.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_process_group.h"

namespace shardrec::comm {

// Test-only (SHARDREC_FAULT_INJECT held_wait): the next MpiWork wait of this process holds its
// thread for good once it has begun, as Open MPI can hold it inside an MPI call, so that only the
// wait watchdog can end the wait.
void hold_next_wait();

class MpiWork final : public WorkImpl {
public:
    // Throws the group's failure (MpiProcessGroup::failure) when it has one: nothing is posted on
    // a failed group.
    MpiWork(const char* collective, const MpiProcessGroup& pg);
    // Waits for a pending collective (also when a Work is overwritten by move-assignment, which
    // skips Work::~Work); a failure is logged, never thrown.
    ~MpiWork() override;
    MpiWork(const MpiWork&) = delete;
    MpiWork& operator=(const MpiWork&) = delete;

    // A slot for the next posted MPI call's request.
    MPI_Request* add_request();
    // Keeps a count array alive until completion and returns its data.
    const int* keep(std::vector<int> values);
    void keep(const Tensor& t);

    void on_complete(std::function<void()> fn) { on_complete_ = std::move(fn); }

    // Checks the rc of posting one MPI call; on failure the requests already posted are abandoned
    // and it throws, naming the collective.
    void check_posted(int rc, const char* call);

    // Throws after the group's timeout_s (0: never), and again on a later call after a failure.
    void wait() override;
    bool is_completed() override;
    // Waits unless the group has failed; then the requests are abandoned without a wait.
    void drop() override;

private:
    enum class State { kPending, kDone, kFailed };

    bool test();
    // True (and the state kFailed) when another collective of the group failed meanwhile.
    bool group_failed();
    [[noreturn]] void fail(const char* call, const std::string& why);
    void abandon();

    const char* collective_;
    std::string group_;
    int group_rank_;
    int group_size_;
    double timeout_s_;
    int64_t sequence_;
    std::shared_ptr<const std::vector<int>> world_ranks_;
    std::shared_ptr<GroupFailure> group_failure_;
    State state_ = State::kPending;
    std::string error_;
    std::vector<MPI_Request> requests_;
    std::vector<std::vector<int>> arrays_;
    std::vector<Tensor> tensors_;
    std::function<void()> on_complete_;
};

}  // namespace shardrec::comm
