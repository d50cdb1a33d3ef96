// Test-only fault injection, so that the end-to-end tests can make one rank of a real `shardrec
// train` misbehave and check that the run still ends cleanly on every rank. Not for production:
// it exists to exercise the failure paths (comm timeout, input checks) with the real binary.
//
//   SHARDREC_FAULT_INJECT=RANK:STEP:KIND[,RANK:STEP:KIND...]
//
// At the start of 1-based train step STEP, rank RANK (or every rank when RANK is *):
//   stall     sleeps for an hour: its peers must fail within runtime.comm_timeout_s
//   exit      ends the process at once with exit code 3 and no message, as a crash would
//   held_wait holds its thread in the step's first collective wait, as Open MPI can inside a call:
//             the wait watchdog must end the process after runtime.comm_timeout_s
//   nan_dense makes dense feature 0 of sample 0 of its batch NaN (runtime.nan_policy)
//   bad_id    makes the first id of its batch the table's row count (runtime.bounds_check)
//   eval_error  fails the evaluation after step STEP with an error (the checkpoint of a finished
//             step must already be written)
// Malformed specs are an Error naming the variable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/sparse/batch.h"

namespace shardrec::train {

struct Fault {
    enum class Kind { kStall, kExit, kHeldWait, kNanDense, kBadId, kEvalError };
    int rank = -1;  // -1: every rank
    int64_t step = 0;
    Kind kind = Kind::kStall;
};

// Parses a spec as above ("" gives none).
std::vector<Fault> parse_faults(const std::string& spec);

class FaultInjector {
public:
    // Reads SHARDREC_FAULT_INJECT.
    explicit FaultInjector(const ModelConfig& model);
    FaultInjector(const ModelConfig& model, std::vector<Fault> faults);

    bool empty() const { return faults_.empty(); }

    // Applies this rank's faults of `step` (1-based) to the process and to `batch`.
    void apply(int64_t step, int rank, Batch& batch) const;
    // Throws on this rank when an eval_error fault names the evaluation after `step`.
    void before_eval(int64_t step, int rank) const;

private:
    std::vector<Fault> faults_;
    std::vector<std::string> features_;  // in table order, with their tables' row counts
    std::vector<int64_t> rows_;
};

}  // namespace shardrec::train
