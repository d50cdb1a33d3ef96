#include "comm/stop_signal.h"

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace shardrec::comm {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int sig) {
    int none = 0;
    if (!g_signal.compare_exchange_strong(none, sig) && sig == SIGINT) {
        std::signal(sig, SIG_DFL);  // a second Ctrl-C: the default action, at once
        std::raise(sig);
    }
    // A repeated SIGTERM or SIGUSR1 is the same request delivered twice: SLURM signals every
    // process of a job and the launcher passes its own signal on; both send SIGKILL themselves
    // when their grace time is over, so the save under way must not be cut short here.
}

}  // namespace

const char* stop_signal_name(int sig) {
    switch (sig) {
        case SIGINT:
            return "SIGINT";
        case SIGTERM:
            return "SIGTERM";
        case SIGUSR1:
            return "SIGUSR1";
        default:
            return "a signal";
    }
}

void install_stop_signal_handlers() {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // a blocking read or write resumes; the loop polls the flag
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGUSR1, &action, nullptr);  // SLURM's warning before a time limit (--signal)
}

int stop_signal_received() {
    return g_signal.load();
}

StopVote::StopVote(std::shared_ptr<ProcessGroup> pg) : pg_(std::move(pg)) {
    install_stop_signal_handlers();
    if (pg_ != nullptr) {
        vote_ = Tensor::zeros({1}, DType::kI32);
    }
}

int StopVote::poll() {
    if (pg_ == nullptr) {
        return stop_signal_received();
    }
    int agreed = 0;
    if (posted_) {
        pending_.wait();
        agreed = vote_.data<int32_t>()[0];
    }
    if (agreed == 0) {
        vote_.data<int32_t>()[0] = stop_signal_received();
        pending_ = pg_->all_reduce(vote_, ReduceOp::kMax);
        posted_ = true;
    }
    return agreed;
}

StopRequested::StopRequested(int signal, int64_t step, const std::string& saved)
    : Error(fmt::format("{} (signal {}) ended the run at train step {} on every rank: steps "
                        "before it are complete, step {} did not run{}{}",
                        stop_signal_name(signal),
                        signal,
                        step,
                        step,
                        saved.empty() ? "" : "; ",
                        saved)),
      signal_(signal) {}

}  // namespace shardrec::comm
