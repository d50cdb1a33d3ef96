// SIGINT, SIGTERM and SIGUSR1 (SLURM's `--signal=USR1@SECONDS` warning before a time limit) stop a
// run between steps on every rank. The handlers only set a flag (all a
// signal handler may safely do); the training loop asks a StopVote once per step, and the ranks
// agree through a one-int all-reduce, so every rank stops at the same step even when only one
// was signalled (`kill` of one rank) and none is left waiting in a collective. A second SIGINT
// while a stop is pending ends the process at once (the default action), as a second Ctrl-C does
// elsewhere; a repeated SIGTERM or SIGUSR1 is ignored, since SLURM and the launcher (mpirun,
// srun) each deliver the same stop request and send SIGKILL themselves after their grace time.
//
// Under mpirun a SIGTERM or SIGINT to mpirun reaches every rank as SIGTERM, followed by SIGKILL
// after odls_base_sigkill_timeout (1 s by default): a step longer than that needs a larger value
// (`mpirun --mca odls_base_sigkill_timeout 30`) for the run to end with its message.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/process_group.h"
#include "engine/core/tensor.h"

namespace shardrec::comm {

// Installs the SIGINT/SIGTERM/SIGUSR1 handlers (idempotent).
void install_stop_signal_handlers();
// The first signal received (0: none).
int stop_signal_received();
// "SIGTERM", "SIGINT", "SIGUSR1".
const char* stop_signal_name(int sig);

// The agreement. poll() completes the vote the previous poll posted and posts the next with this
// rank's flag: a vote is one step old when it is read, so polling never waits for a peer that is
// still computing, and a signal stops the run one step after it arrived. Collective over pg (null:
// one process, the flag itself), called the same number of times on every rank.
class StopVote {
public:
    explicit StopVote(std::shared_ptr<ProcessGroup> pg);

    // The signal some rank received, agreed by every rank (0: go on).
    int poll();

private:
    std::shared_ptr<ProcessGroup> pg_;
    Tensor vote_;
    Work pending_;
    bool posted_ = false;
};

// What the training loop throws once the ranks agreed to stop, before `step` (1-based) runs;
// tools/main.cpp logs it on every rank and exits with 128 + the signal. `saved`: what became of
// the last finished step ("step 880 is saved in DIR"), appended to the message.
class StopRequested : public Error {
public:
    StopRequested(int signal, int64_t step, const std::string& saved = "");

    int signal() const { return signal_; }

private:
    int signal_;
};

}  // namespace shardrec::comm
