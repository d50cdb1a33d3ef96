// Completion by polling: MPI has no timeout, so wait() tests the requests until they complete or
// the deadline passes, spinning first and then sleeping so a long wait leaves the core to others.
//
// A thread of its own, the wait watchdog, reports a stop signal during a long wait (where the
// process waits and which peers have not arrived) and ends a wait that outlasts its timeout. It
// needs no MPI, so it acts even when the waiting thread is stuck inside MPI: Open MPI 4.1 prints
// its warning on a connection refused by a dead process from inside its progress loop, and that
// call can hold the thread until the launcher's SIGKILL, which never comes when the job outlives
// its dead processes (orte_enable_recovery).
#include "comm/mpi_work.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/mpi_check.h"
#include "comm/mpi_env.h"
#include "comm/peer_probe.h"
#include "comm/stop_signal.h"
#include "engine/core/error.h"
#include "engine/core/log.h"

namespace shardrec::comm {
namespace {

// Waits shorter than this poll back to back: MPI progresses a collective only inside MPI calls,
// so any pause between polls stretches every round of its algorithm (a sched_yield per poll
// made a 4 MB Iallreduce 3x slower on a busy host; Open MPI yields by itself when ranks
// oversubscribe the cores). Past it the peers are late (compute imbalance, a dead rank), and
// sleeps between polls free the core for compute threads.
constexpr double kSpinS = 5e-3;
constexpr int64_t kMinSleepUs = 50;
constexpr int64_t kMaxSleepUs = 200;
// A wait this long while a stop signal is pending says where it waits and for whom: the launcher
// kills the surviving ranks of a job that lost a host (SIGTERM, then SIGKILL), and they would
// otherwise end without naming the collective or the peers they waited for.
constexpr double kStopReportS = 0.5;
// A wait this long past its timeout has a waiting thread that cannot fail it (it fails within
// milliseconds of the timeout when it polls).
constexpr double kOverdueS = 0.5;

[[noreturn]] void end_overdue_wait(const LongWait& wait) {
    // The log may block on the same stderr that holds the waiting thread: end regardless.
    std::thread([] {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        std::_Exit(1);
    }).detach();
    log::all().error(
        "{}: {} did not complete within {} s (runtime.comm_timeout_s or SHARDREC_COMM_TIMEOUT_S): "
        "{}; the waiting thread is held inside MPI ({:.1f} s into the wait), so the process ends",
        error_context(), wait.what, wait.timeout_s,
        describe_missing_peers(wait.what, wait.world_ranks, 0.5).value_or("every peer arrived"),
        wait.waited_s);
    log::all().flush();
    // Not MPI_Abort: MPI is initialised for one thread's calls. mpirun and srun end a job whose
    // rank exits non-zero.
    std::_Exit(1);
}

// The wait watchdog: from the first wait on, a thread checks every 50 ms for a wait overdue by
// kOverdueS, which it fails and ends the process on, and for a stop signal during a wait of
// kStopReportS or longer, which it reports once per wait (the peer probes need no MPI either).
void start_wait_watchdog() {
    static std::once_flag once;
    std::call_once(once, [] {
        std::thread([] {
            for (;;) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                if (const std::optional<LongWait> overdue = claim_overdue_wait(kOverdueS)) {
                    end_overdue_wait(*overdue);
                }
                if (stop_signal_received() == 0) {
                    continue;
                }
                const std::optional<LongWait> wait = claim_long_wait(kStopReportS);
                if (!wait) {
                    continue;
                }
                const ProcessInfo& me = process_info();
                log::all().warn(
                    "rank {} on host {}: asked to stop ({}) while waiting {:.1f} s in {}", me.rank,
                    me.host, stop_signal_name(stop_signal_received()), wait->waited_s, wait->what);
                log::all().warn(
                    "rank {} on host {}: in {}: {}", me.rank, me.host, wait->what,
                    describe_missing_peers(wait->what, wait->world_ranks, 0.5).value_or(""));
            }
        }).detach();
    });
}

std::atomic<bool> g_hold_next_wait{false};

// What a failed collective may still touch: MPI cannot cancel one, and a late peer can complete
// it later, so it lives until the process ends.
struct Abandoned {
    std::vector<MPI_Request> requests;
    std::vector<std::vector<int>> arrays;
    std::vector<Tensor> tensors;
};

}  // namespace

void hold_next_wait() {
    g_hold_next_wait = true;
}

MpiWork::MpiWork(const char* collective, const MpiProcessGroup& pg)
    : collective_(collective),
      group_(pg.name()),
      group_rank_(pg.rank()),
      group_size_(pg.size()),
      timeout_s_(pg.timeout_s()),
      sequence_(pg.next_sequence()),
      world_ranks_(pg.world_ranks()),
      group_failure_(pg.failure_state()) {
    if (!group_failure_->error.empty()) {
        throw Error(group_failure_->error);
    }
}

MpiWork::~MpiWork() {
    if (state_ == State::kPending) {
        try {
            drop();
        } catch (const std::exception& e) {
            log::all().error("a dropped Work failed: {}", e.what());
        }
    }
    if (state_ == State::kFailed) {
        abandon();
    }
}

MPI_Request* MpiWork::add_request() {
    requests_.push_back(MPI_REQUEST_NULL);
    return &requests_.back();
}

// A moved vector keeps its buffer, so the pointer survives later keeps.
const int* MpiWork::keep(std::vector<int> values) {
    arrays_.push_back(std::move(values));
    return arrays_.back().data();
}

void MpiWork::keep(const Tensor& t) {
    tensors_.push_back(t);
}

void MpiWork::check_posted(int rc, const char* call) {
    if (rc != MPI_SUCCESS) {
        fail(call, "failed: " + mpi_error_string(rc));
    }
}

void MpiWork::drop() {
    if (state_ == State::kPending && group_failed()) {
        return;  // the group's error was reported where it happened
    }
    wait();
}

bool MpiWork::group_failed() {
    if (group_failure_->error.empty()) {
        return false;
    }
    state_ = State::kFailed;
    error_ = group_failure_->error;
    return true;
}

void MpiWork::wait() {
    if (state_ == State::kDone) {
        return;
    }
    if (state_ == State::kFailed || group_failed()) {
        throw Error(error_);
    }
    start_wait_watchdog();
    const WaitingIn waiting(collective_, group_, sequence_, *world_ranks_, timeout_s_);
    while (g_hold_next_wait) {
        std::this_thread::sleep_for(std::chrono::hours(1));
    }
    const auto start = std::chrono::steady_clock::now();
    int64_t sleep_us = kMinSleepUs;
    PeerDeadline deadline(timeout_s_, *world_ranks_);
    while (!test()) {
        const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
        if (waited.count() < kSpinS) {
            continue;
        }
        if (!deadline.ask_when_due(waited.count(), collective_, sequence_, group_,
                                   [this] { return test(); })) {
            return;  // completed within the timeout after all
        }
        if (const std::optional<std::string> missing = deadline.expired(waited.count())) {
            fail("wait", fmt::format("did not complete within {} s (runtime.comm_timeout_s or "
                                     "SHARDREC_COMM_TIMEOUT_S): {}",
                                     timeout_s_, *missing));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        sleep_us = std::min(2 * sleep_us, kMaxSleepUs);
    }
}

bool MpiWork::is_completed() {
    if (state_ == State::kDone) {
        return true;
    }
    if (state_ == State::kFailed || group_failed()) {
        throw Error(error_);
    }
    return test();
}

bool MpiWork::test() {
    int flag = 0;
    const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
        fail("MPI_Testall", "failed: " + mpi_error_string(rc));
    }
    if (!flag) {
        return false;
    }
    state_ = State::kDone;
    if (on_complete_) {
        on_complete_();
    }
    tensors_.clear();
    return true;
}

// The requests stay posted (see abandon()) and the destructor does not wait for them again.
void MpiWork::fail(const char* call, const std::string& why) {
    state_ = State::kFailed;
    try {
        throw_error(call, collective_, __FILE__, __LINE__,
                    fmt::format("{} on group '{}' (rank {} of {}, its collective #{}) {}",
                                collective_, group_, group_rank_, group_size_, sequence_, why));
    } catch (const Error& e) {
        error_ = e.what();
        if (group_failure_->error.empty()) {
            group_failure_->error = error_;
        }
        throw;
    }
}

void MpiWork::abandon() {
    static std::mutex mutex;
    static std::vector<std::unique_ptr<Abandoned>> graveyard;
    const std::lock_guard<std::mutex> lock(mutex);
    graveyard.push_back(std::make_unique<Abandoned>(
        Abandoned{std::move(requests_), std::move(arrays_), std::move(tensors_)}));
}

}  // namespace shardrec::comm
