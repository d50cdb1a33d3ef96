// The collectives bench_comm times, each with the expected output of every rank computed
// locally from (rank, slot, index): small integers, exact in every dtype and in sums over ranks.
#include "tools/bench_comm/bench_collectives.h"

#include <cstring>

#include "engine/core/rng.h"

namespace shardrec::bench {
namespace {

// ---- seeded values ----

// Small integers: exact in every dtype, and their sums over ranks too.
double value(int src, int64_t slot, int64_t i, DType dtype) {
    const uint64_t h = rng::hash(0xbe4c, static_cast<uint64_t>(src), static_cast<uint64_t>(slot),
                                 static_cast<uint64_t>(i));
    return dtype == DType::kU8 ? static_cast<double>(h % 5) : static_cast<double>(h % 9) - 4;
}

void store(Tensor& t, int64_t i, double v) {
    void* p = static_cast<char*>(t.data_ptr()) + i * static_cast<int64_t>(dtype_size(t.dtype()));
    switch (t.dtype()) {
        case DType::kF32:
            *static_cast<float*>(p) = static_cast<float>(v);
            return;
        case DType::kF16:
            *static_cast<Half*>(p) = float_to_half(static_cast<float>(v));
            return;
        case DType::kBF16:
            *static_cast<BFloat16*>(p) = float_to_bf16(static_cast<float>(v));
            return;
        case DType::kI32:
            *static_cast<int32_t*>(p) = static_cast<int32_t>(v);
            return;
        case DType::kI64:
            *static_cast<int64_t*>(p) = static_cast<int64_t>(v);
            return;
        case DType::kI8:
            *static_cast<int8_t*>(p) = static_cast<int8_t>(v);
            return;
        case DType::kU8:
            *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
            return;
    }
}

Tensor filled(int64_t n, DType dtype, double v) {
    Tensor t = Tensor::empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
        store(t, i, v);
    }
    return t;
}

int64_t count_wrong(const Tensor& got, const Tensor& expected) {
    if (std::memcmp(got.data_ptr(), expected.data_ptr(), got.nbytes()) == 0) {
        return 0;
    }
    const size_t esize = dtype_size(got.dtype());
    const auto* g = static_cast<const char*>(got.data_ptr());
    const auto* e = static_cast<const char*>(expected.data_ptr());
    int64_t wrong = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
        wrong += std::memcmp(g + i * esize, e + i * esize, esize) != 0;
    }
    return wrong;
}

constexpr double kPoison = 100;

// ---- the collectives ----

class AllToAllV final : public Collective {
public:
    // Rank src's split to dst: count/n scaled by a weight in [0.5, 1.5), normalised to count.
    AllToAllV(comm::ProcessGroup& pg, int64_t count, DType dtype) : pg_(pg) {
        const int n = pg.size();
        const int me = pg.rank();
        std::vector<std::vector<int64_t>> splits(n);
        for (int src = 0; src < n; ++src) {
            splits[src] = kjt_splits(src, n, count);
        }
        out_splits_.resize(n);
        for (int src = 0; src < n; ++src) {
            out_splits_[src] = splits[src][me];
        }
        in_splits_ = splits[me];
        input_ = Tensor::empty({count}, dtype);
        int64_t total_out = 0;
        for (const int64_t s : out_splits_) {
            total_out += s;
        }
        expected_ = Tensor::empty({total_out}, dtype);
        for (int r = 0, in_at = 0, out_at = 0; r < n; ++r) {
            for (int64_t j = 0; j < in_splits_[r]; ++j) {
                store(input_, in_at++, value(me, r, j, dtype));
            }
            for (int64_t j = 0; j < out_splits_[r]; ++j) {
                store(expected_, out_at++, value(r, me, j, dtype));
            }
        }
        poison_ = filled(total_out, dtype, kPoison);
        output_ = Tensor::empty({total_out}, dtype);
    }

    void reset() override { output_.copy_from(poison_); }

    comm::Work post() override {
        return pg_.all_to_all_v(input_, in_splits_, output_, out_splits_);
    }

    int64_t wrong() const override { return count_wrong(output_, expected_); }

private:
    static std::vector<int64_t> kjt_splits(int src, int n, int64_t count) {
        std::vector<double> w(n);
        double sum = 0;
        for (int dst = 0; dst < n; ++dst) {
            sum += w[dst] = 0.5 + rng::uniform(0x4a7, src, dst);
        }
        std::vector<int64_t> s(n);
        int64_t used = 0;
        for (int dst = 0; dst + 1 < n; ++dst) {
            used += s[dst] = static_cast<int64_t>(count * w[dst] / sum);
        }
        s[n - 1] = count - used;
        return s;
    }

    comm::ProcessGroup& pg_;
    std::vector<int64_t> in_splits_, out_splits_;
    Tensor input_, output_, expected_, poison_;
};

class AllReduce final : public Collective {
public:
    AllReduce(comm::ProcessGroup& pg, int64_t count, DType dtype) : pg_(pg) {
        pristine_ = Tensor::empty({count}, dtype);
        expected_ = Tensor::empty({count}, dtype);
        for (int64_t i = 0; i < count; ++i) {
            double sum = 0;
            for (int src = 0; src < pg.size(); ++src) {
                sum += value(src, 0, i, dtype);
            }
            store(pristine_, i, value(pg.rank(), 0, i, dtype));
            store(expected_, i, sum);
        }
        tensor_ = Tensor::empty({count}, dtype);
    }

    void reset() override { tensor_.copy_from(pristine_); }  // in place: restore the input

    comm::Work post() override { return pg_.all_reduce(tensor_, comm::ReduceOp::kSum); }

    int64_t wrong() const override { return count_wrong(tensor_, expected_); }

private:
    comm::ProcessGroup& pg_;
    Tensor pristine_, tensor_, expected_;
};

class ReduceScatterV final : public Collective {
public:
    ReduceScatterV(comm::ProcessGroup& pg, int64_t count, DType dtype)
        : pg_(pg), splits_(pg.size(), count / pg.size()) {
        const int64_t mine = splits_[pg.rank()];
        input_ = Tensor::empty({count}, dtype);
        for (int64_t k = 0; k < count; ++k) {
            store(input_, k, value(pg.rank(), 0, k, dtype));
        }
        expected_ = Tensor::empty({mine}, dtype);
        for (int64_t j = 0; j < mine; ++j) {
            double sum = 0;
            for (int src = 0; src < pg.size(); ++src) {
                sum += value(src, 0, pg.rank() * mine + j, dtype);
            }
            store(expected_, j, sum);
        }
        poison_ = filled(mine, dtype, kPoison);
        output_ = Tensor::empty({mine}, dtype);
    }

    void reset() override { output_.copy_from(poison_); }

    comm::Work post() override {
        return pg_.reduce_scatter_v(input_, splits_, output_, comm::ReduceOp::kSum);
    }

    int64_t wrong() const override { return count_wrong(output_, expected_); }

private:
    comm::ProcessGroup& pg_;
    std::vector<int64_t> splits_;
    Tensor input_, output_, expected_, poison_;
};

class AllGatherV final : public Collective {
public:
    AllGatherV(comm::ProcessGroup& pg, int64_t count, DType dtype)
        : pg_(pg), splits_(pg.size(), count / pg.size()) {
        const int64_t each = splits_[0];
        input_ = Tensor::empty({each}, dtype);
        for (int64_t j = 0; j < each; ++j) {
            store(input_, j, value(pg.rank(), 0, j, dtype));
        }
        expected_ = Tensor::empty({count}, dtype);
        for (int src = 0; src < pg.size(); ++src) {
            for (int64_t j = 0; j < each; ++j) {
                store(expected_, src * each + j, value(src, 0, j, dtype));
            }
        }
        poison_ = filled(count, dtype, kPoison);
        output_ = Tensor::empty({count}, dtype);
    }

    void reset() override { output_.copy_from(poison_); }

    comm::Work post() override { return pg_.all_gather_v(input_, output_, splits_); }

    int64_t wrong() const override { return count_wrong(output_, expected_); }

private:
    comm::ProcessGroup& pg_;
    std::vector<int64_t> splits_;
    Tensor input_, output_, expected_, poison_;
};

}  // namespace

std::unique_ptr<Collective> make_collective(const std::string& op,
                                            comm::ProcessGroup& pg,
                                            int64_t count,
                                            DType dtype) {
    if (op == "all_to_all_v") {
        return std::make_unique<AllToAllV>(pg, count, dtype);
    }
    if (op == "all_reduce") {
        return std::make_unique<AllReduce>(pg, count, dtype);
    }
    if (op == "reduce_scatter_v") {
        return std::make_unique<ReduceScatterV>(pg, count, dtype);
    }
    if (op == "all_gather_v") {
        return std::make_unique<AllGatherV>(pg, count, dtype);
    }
    SR_CHECK(false, "unknown collective '{}' (see --help)", op);
    return nullptr;
}

double busbw_factor(const std::string& op, int n) {
    const double f = static_cast<double>(n - 1) / n;
    return op == "all_reduce" ? 2 * f : f;
}

}  // namespace shardrec::bench
