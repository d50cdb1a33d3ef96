// The shared collective cases (collective_cases.h).
#include "test/comm/collective_cases.h"

#include <algorithm>
#include <numeric>

#include "test/comm/comm_pattern.h"
#include "test/support/compare.h"

namespace shardrec::test {

uint64_t case_seed(DType dtype, int variant) {
    return test_seed() * 131 + static_cast<uint64_t>(dtype) * 7 + static_cast<uint64_t>(variant);
}

namespace {

using comm::ReduceOp;

constexpr double kPoison = 100;  // outside every pattern value and every reduction of them

Tensor poisoned(int64_t n, DType dtype) {
    Tensor t = Tensor::empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
        store_value(t, i, kPoison);
    }
    return t;
}

// The reduction over ranks of element i of slot 0, as the engine computes it (kAvg: f32 sum, then
// one f32 division).
double reduce_over_ranks(uint64_t seed, int world_size, int64_t i, DType dtype, ReduceOp op) {
    double acc = static_cast<double>(pattern_value(seed, 0, 0, i, dtype));
    for (int src = 1; src < world_size; ++src) {
        const double v = static_cast<double>(pattern_value(seed, src, 0, i, dtype));
        acc = op == ReduceOp::kMax   ? std::max(acc, v)
              : op == ReduceOp::kMin ? std::min(acc, v)
                                     : acc + v;
    }
    if (op == ReduceOp::kAvg) {
        return static_cast<float>(acc) / static_cast<float>(world_size);
    }
    return acc;
}

// Rank src sends unit * [0, 4) elements to dst, and none to the next rank (an empty segment).
int64_t a2a_split(uint64_t seed, int src, int dst, int world_size, int64_t unit) {
    if (world_size > 1 && dst == (src + 1) % world_size) {
        return 0;
    }
    return unit * pattern_count(seed, src, dst, 4);
}

}  // namespace

using comm::ReduceOp;

const char* op_name(ReduceOp op) {
    switch (op) {
        case ReduceOp::kSum:
            return "sum";
        case ReduceOp::kAvg:
            return "avg";
        case ReduceOp::kMax:
            return "max";
        case ReduceOp::kMin:
            return "min";
    }
    return "?";
}

// Rank me's input and output splits.
std::pair<std::vector<int64_t>, std::vector<int64_t>> a2a_splits(uint64_t seed,
                                                                 int me,
                                                                 int n,
                                                                 int64_t unit) {
    std::vector<int64_t> in_splits(n), out_splits(n);
    for (int r = 0; r < n; ++r) {
        in_splits[r] = a2a_split(seed, me, r, n, unit);
        out_splits[r] = a2a_split(seed, r, me, n, unit);
    }
    return {in_splits, out_splits};
}

std::vector<int64_t> all_gather_splits(uint64_t seed, int n, int64_t unit) {
    std::vector<int64_t> splits(n);
    for (int r = 0; r < n; ++r) {
        splits[r] = unit * pattern_count(seed, r, 77, 4);
    }
    return splits;
}

std::string run_all_to_all_v(comm::ProcessGroup& pg, DType dtype, uint64_t seed, int64_t unit) {
    const int n = pg.size();
    const int me = pg.rank();
    const auto [in_splits, out_splits] = a2a_splits(seed, me, n, unit);
    Tensor input = poisoned(std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0}), dtype);
    Tensor expected =
        poisoned(std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0}), dtype);
    for (int r = 0, in_at = 0, out_at = 0; r < n; ++r) {
        for (int64_t j = 0; j < in_splits[r]; ++j) {
            store_value(input, in_at++, pattern_value(seed, me, r, j, dtype));
        }
        for (int64_t j = 0; j < out_splits[r]; ++j) {
            store_value(expected, out_at++, pattern_value(seed, r, me, j, dtype));
        }
    }
    Tensor output = poisoned(expected.numel(), dtype);
    pg.all_to_all_v(input, in_splits, output, out_splits).wait();
    return first_mismatch(output, expected);
}

std::string run_all_reduce(comm::ProcessGroup& pg, DType dtype, ReduceOp op, uint64_t seed) {
    constexpr int64_t kCount = 37;
    Tensor t = Tensor::empty({kCount}, dtype);
    Tensor expected = Tensor::empty({kCount}, dtype);
    for (int64_t i = 0; i < kCount; ++i) {
        store_value(t, i, pattern_value(seed, pg.rank(), 0, i, dtype));
        store_value(expected, i, reduce_over_ranks(seed, pg.size(), i, dtype, op));
    }
    pg.all_reduce(t, op).wait();
    return first_mismatch(t, expected);
}

std::string run_reduce_scatter_v(comm::ProcessGroup& pg, DType dtype, ReduceOp op, uint64_t seed) {
    std::vector<int64_t> splits(pg.size());
    for (int r = 0; r < pg.size(); ++r) {
        splits[r] = pattern_count(seed, r, 99, 6);
    }
    const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    const int64_t my_offset =
        std::accumulate(splits.begin(), splits.begin() + pg.rank(), int64_t{0});
    Tensor input = Tensor::empty({total}, dtype);
    for (int64_t k = 0; k < total; ++k) {
        store_value(input, k, pattern_value(seed, pg.rank(), 0, k, dtype));
    }
    Tensor expected = Tensor::empty({splits[pg.rank()]}, dtype);
    for (int64_t j = 0; j < expected.numel(); ++j) {
        store_value(expected, j, reduce_over_ranks(seed, pg.size(), my_offset + j, dtype, op));
    }
    Tensor output = poisoned(expected.numel(), dtype);
    pg.reduce_scatter_v(input, splits, output, op).wait();
    return first_mismatch(output, expected);
}

std::string run_all_gather_v(comm::ProcessGroup& pg, DType dtype, uint64_t seed, int64_t unit) {
    const std::vector<int64_t> splits = all_gather_splits(seed, pg.size(), unit);
    Tensor input = Tensor::empty({splits[pg.rank()]}, dtype);
    for (int64_t j = 0; j < input.numel(); ++j) {
        store_value(input, j, pattern_value(seed, pg.rank(), 0, j, dtype));
    }
    Tensor expected =
        Tensor::empty({std::accumulate(splits.begin(), splits.end(), int64_t{0})}, dtype);
    for (int r = 0, at = 0; r < pg.size(); ++r) {
        for (int64_t j = 0; j < splits[r]; ++j) {
            store_value(expected, at++, pattern_value(seed, r, 0, j, dtype));
        }
    }
    Tensor output = poisoned(expected.numel(), dtype);
    pg.all_gather_v(input, output, splits).wait();
    return first_mismatch(output, expected);
}

std::string run_broadcast(comm::ProcessGroup& pg, DType dtype, int root, uint64_t seed) {
    constexpr int64_t kCount = 29;
    Tensor t = poisoned(kCount, dtype);
    Tensor expected = Tensor::empty({kCount}, dtype);
    for (int64_t i = 0; i < kCount; ++i) {
        store_value(expected, i, pattern_value(seed, root, 0, i, dtype));
    }
    if (pg.rank() == root) {
        t.copy_from(expected);
    }
    pg.broadcast(t, root).wait();
    return first_mismatch(t, expected);
}

}  // namespace shardrec::test
