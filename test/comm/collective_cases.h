// The collective cases of the ProcessGroup tests, shared by every backend's test (MPI in
// test_collectives.cpp, NCCL in test/comm_cuda): each runs one collective on host tensors filled
// from seeds and returns "" when the output is bitwise the oracle each rank computes locally
// (comm_pattern.h), else the first mismatch. Unequal and empty segments throughout.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/tensor.h"

namespace shardrec::test {

const char* op_name(comm::ReduceOp op);

// The seed of one case of a backend's test: the run's test_seed(), the dtype and a variant.
uint64_t case_seed(DType dtype, int variant);

// Rank me's all_to_all_v input and output splits (multiples of unit; one empty segment).
std::pair<std::vector<int64_t>, std::vector<int64_t>> a2a_splits(uint64_t seed,
                                                                 int me,
                                                                 int n,
                                                                 int64_t unit);
std::vector<int64_t> all_gather_splits(uint64_t seed, int n, int64_t unit);

std::string run_all_to_all_v(comm::ProcessGroup& pg, DType dtype, uint64_t seed, int64_t unit);
std::string run_all_reduce(comm::ProcessGroup& pg, DType dtype, comm::ReduceOp op, uint64_t seed);
std::string run_reduce_scatter_v(comm::ProcessGroup& pg,
                                 DType dtype,
                                 comm::ReduceOp op,
                                 uint64_t seed);
std::string run_all_gather_v(comm::ProcessGroup& pg, DType dtype, uint64_t seed, int64_t unit);
std::string run_broadcast(comm::ProcessGroup& pg, DType dtype, int root, uint64_t seed);

}  // namespace shardrec::test
