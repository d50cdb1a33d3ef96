// The collectives bench_comm times, behind one interface: inputs and expected outputs are built
// once per size; reset() restores the input and poisons the output before each iteration
// (untimed), post() is what is timed, wrong() counts the elements that differ from expected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/process_group.h"

namespace shardrec::bench {

class Collective {
public:
    virtual ~Collective() = default;
    virtual void reset() = 0;
    virtual comm::Work post() = 0;
    virtual int64_t wrong() const = 0;
};

// op: all_to_all_v (unequal, KeyedJaggedTensor-like segments), all_reduce (kSum),
// reduce_scatter_v and all_gather_v (equal segments); count elements of dtype in the largest
// per-rank buffer (a multiple of pg.size() except for all_reduce).
std::unique_ptr<Collective> make_collective(const std::string& op,
                                            comm::ProcessGroup& pg,
                                            int64_t count,
                                            DType dtype);

// nccl-tests: busbw = algbw * factor, (n-1)/n, and 2(n-1)/n for all_reduce.
double busbw_factor(const std::string& op, int world_size);

}  // namespace shardrec::bench
