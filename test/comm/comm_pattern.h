// Seeded data for the collective tests (nccl-tests style): rank r's input element i is a pure
// function of (seed, r, slot, i), so every rank computes the expected output of a collective
// locally, for all source ranks, and no collective checks another. Values are small integers:
// sums over ranks are exact in every dtype, so results must match bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_process_group.h"
#include "engine/core/tensor.h"

namespace shardrec::test {

// The world group, as the MPI backend (its knobs: timeout, max count).
std::shared_ptr<comm::MpiProcessGroup> mpi_world();

const std::vector<DType>& all_dtypes();
const std::vector<DType>& reducible_dtypes();  // MPI reduces these (not f16 / bf16)

// In [-4, 4] ([0, 4] for u8): source rank src, a slot (destination rank or segment), element i.
int64_t pattern_value(uint64_t seed, int64_t src, int64_t slot, int64_t i, DType dtype);
// A count in [0, max): deterministic in (seed, a, b).
int64_t pattern_count(uint64_t seed, int64_t a, int64_t b, int64_t max);

// Element i of a tensor of any dtype, as a double; store_value writes v converted exactly.
double load_value(const Tensor& t, int64_t i);
void store_value(Tensor& t, int64_t i, double v);

// "" when got and expected are bitwise equal; else the first differing element and the counts.
std::string first_mismatch(const Tensor& got, const Tensor& expected);

}  // namespace shardrec::test
