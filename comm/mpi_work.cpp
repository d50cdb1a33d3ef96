// Completion by polling: MPI has no timeout, so wait() tests the requests until they complete or
// the deadline passes, spinning first and then sleeping so a long wait leaves the core to others.
//
// A stop signal during a long wait is reported twice over: a reporter thread says where the
// process waits (it needs no MPI, so it speaks even when the waiting thread is stuck inside MPI:
// Open MPI 4.1 prints its warning on a connection refused by a dead process from inside its
// progress loop, and that print can block until the launcher's SIGKILL), and the waiting thread
// then probes the peers and says which of them have not arrived.
#include "comm/mpi_work.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/mpi_check.h"
#include "comm/mpi_env.h"
#include "comm/mpi_peer_probe.h"
#include "comm/stop_signal.h"
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

// A wait as the peer probes and the messages name it: "all_reduce #12 of group 'world'".
std::string wait_name(const char* collective, int64_t sequence, const std::string& group) {
    return fmt::format("{} #{} of group '{}'", collective, sequence, group);
}

// The wait in progress (the collectives run on one thread at a time), for the stop reporter.
// Set and cleared under the mutex; the waiting MpiWork outlives its entry. Never destroyed, so the
// reporter thread may read it while the process exits.
struct WaitBoard {
    std::mutex mutex;
    const char* collective = nullptr;  // null: no wait in progress
    const std::string* group = nullptr;
    int64_t sequence = 0;
    std::chrono::steady_clock::time_point since;
    bool said = false;  // this wait's stop was reported
};

WaitBoard& wait_board() {
    static WaitBoard* board = new WaitBoard;
    return *board;
}

// Says, once per wait, that a stop signal arrived while this process waits in a collective.
void say_stop_while_waiting() {
    WaitBoard& b = wait_board();
    std::string what;
    double waited = 0;
    {
        std::lock_guard<std::mutex> lock(b.mutex);
        if (b.collective == nullptr || b.said) {
            return;
        }
        b.said = true;
        what = wait_name(b.collective, b.sequence, *b.group);
        waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - b.since).count();
    }
    const ProcessInfo& me = process_info();
    log::all().warn("rank {} on host {}: asked to stop ({}) while waiting {:.1f} s in {}", me.rank,
                    me.host, stop_signal_name(stop_signal_received()), waited, what);
}

// The stop reporter: from the first wait on, a thread checks every 50 ms for a stop signal
// during a wait of kStopReportS or longer.
void start_stop_reporter() {
    static std::once_flag once;
    std::call_once(once, [] {
        std::thread([] {
            for (;;) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                if (stop_signal_received() == 0) {
                    continue;
                }
                bool long_wait = false;
                {
                    WaitBoard& b = wait_board();
                    std::lock_guard<std::mutex> lock(b.mutex);
                    long_wait = b.collective != nullptr && !b.said &&
                                std::chrono::steady_clock::now() - b.since >
                                    std::chrono::duration<double>(kStopReportS);
                }
                if (long_wait) {
                    say_stop_while_waiting();
                }
            }
        }).detach();
    });
}

// Enters this wait on the board for its lifetime.
class OnWaitBoard {
public:
    OnWaitBoard(const char* collective, const std::string& group, int64_t sequence) {
        WaitBoard& b = wait_board();
        std::lock_guard<std::mutex> lock(b.mutex);
        b.collective = collective;
        b.group = &group;
        b.sequence = sequence;
        b.since = std::chrono::steady_clock::now();
        b.said = false;
    }

    ~OnWaitBoard() {
        WaitBoard& b = wait_board();
        std::lock_guard<std::mutex> lock(b.mutex);
        b.collective = nullptr;
        b.group = nullptr;
    }

    OnWaitBoard(const OnWaitBoard&) = delete;
    OnWaitBoard& operator=(const OnWaitBoard&) = delete;
};

// What a failed collective may still touch: MPI cannot cancel one, and a late peer can complete
// it later, so it lives until the process ends.
struct Abandoned {
    std::vector<MPI_Request> requests;
    std::vector<std::vector<int>> arrays;
    std::vector<Tensor> tensors;
};

}  // namespace

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
    start_stop_reporter();
    const OnWaitBoard on_board(collective_, group_, sequence_);
    const auto start = std::chrono::steady_clock::now();
    int64_t sleep_us = kMinSleepUs;
    std::string what;                  // this wait, as the peer probes name it
    std::optional<WaitingIn> waiting;  // past the spin: peers' probes are answered
    bool stop_reported = false;
    while (!test()) {
        const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
        if (waited.count() < kSpinS) {
            continue;
        }
        if (!waiting) {
            what = wait_name(collective_, sequence_, group_);
            waiting.emplace(what);
        }
        // The peers are probed in the timeout's last tenth (up to 2 s), still polling the
        // collective, so that the wait fails, naming them, when the timeout is up.
        const double grace_s = std::clamp(0.1 * timeout_s_, 0.05, 2.0);
        if (timeout_s_ > 0 && waited.count() > timeout_s_ - grace_s) {
            const std::optional<std::string> missing = describe_missing_peers(
                what, *world_ranks_, std::max(timeout_s_ - waited.count(), 0.05),
                [this] { return test(); });
            if (!missing) {
                return;  // completed within the timeout after all
            }
            fail("wait", fmt::format("did not complete within {} s (runtime.comm_timeout_s or "
                                     "SHARDREC_COMM_TIMEOUT_S): {}",
                                     timeout_s_, *missing));
        }
        if (!stop_reported && waited.count() > kStopReportS && stop_signal_received() != 0) {
            // Said, not thrown: under a preemption every rank is asked to stop and a late peer
            // still arrives; this rank goes on waiting until the stop or the launcher's kill.
            // Where it waits first (unless the reporter said it), then who is missing.
            stop_reported = true;
            say_stop_while_waiting();
            const ProcessInfo& me = process_info();
            log::all().warn(
                "rank {} on host {}: in {}: {}", me.rank, me.host, what,
                describe_missing_peers(what, *world_ranks_, std::clamp(0.1 * timeout_s_, 0.05, 0.5))
                    .value_or(""));
        }
        answer_peer_probes();
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
