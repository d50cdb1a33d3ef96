// Pooled output dists over real ranks: the 18.4 all-to-all on rank pairs, random all-to-all,
// reduce-scatter and all-gather with a variable batch per rank, their backwards (the adjoint
// collective) with gradient division on and off, and no allocation once the shapes are seen.
// Values are small dyadic numbers, so every sum is exact and the checks are bitwise.
#include <catch2/catch.hpp>

#include "engine/core/allocator.h"
#include "engine/core/rng.h"
#include "engine/distributed/pooled_embeddings.h"
#include "test/distributed_mpi/dist_mpi_util.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using I64s = std::vector<int64_t>;
using F32s = std::vector<float>;

namespace {

// The (seed, rank, row, col) value of a rank's tensor: a multiple of 1/2 in [-5.5, 5.5].
float cell(uint64_t seed, int64_t rank, int64_t row, int64_t col) {
    const uint64_t h = rng::hash(seed, static_cast<uint64_t>(rank), static_cast<uint64_t>(row),
                                 static_cast<uint64_t>(col));
    return static_cast<float>(static_cast<int64_t>(h % 23) - 11) * 0.5f;
}

Tensor make_matrix(uint64_t seed, int64_t rank, int64_t rows, int64_t cols) {
    F32s v;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            v.push_back(cell(seed, rank, r, c));
        }
    }
    return Tensor::from_vector(v, {rows, cols});
}

I64s random_counts(uint64_t seed, uint64_t stream, int64_t n, int64_t max) {
    rng::Rng gen(seed, stream);
    I64s out;
    for (int64_t i = 0; i < n; ++i) {
        out.push_back(gen.randint(0, max + 1));
    }
    return out;
}

I64s prefix(const I64s& v) {
    I64s out(v.size() + 1, 0);
    for (size_t i = 0; i < v.size(); ++i) {
        out[i + 1] = out[i] + v[i];
    }
    return out;
}

}  // namespace

TEST_CASE("PooledEmbeddingsAllToAll: 18.4 example on two ranks", "[distributed][mpi][even_ranks]") {
    const auto pg = pair_group();
    if (!pg) {
        return;
    }
    const int rank = pg->rank();
    // t0 (6, 2) on rank 0 with t0[j, c] = 10 j + c; t1 (6, 1) on rank 1 with t1[j] = 100 + j.
    F32s local;
    for (int64_t j = 0; j < 6; ++j) {
        if (rank == 0) {
            local.insert(local.end(), {10.0f * j, 10.0f * j + 1});
        } else {
            local.push_back(100.0f + j);
        }
    }
    const Tensor t = Tensor::from_vector(local, {6, rank == 0 ? 2 : 1});
    PooledEmbeddingsAllToAll a2a(pg, {2, 1});
    const Tensor out = a2a.forward(t);
    REQUIRE(out.shape() == Shape{3, 3});
    F32s want;
    for (int64_t i = 0; i < 3; ++i) {
        const int64_t j = 3 * rank + i;  // out_r[i] = [t0[3r+i, :], t1[3r+i, :]]
        want.insert(want.end(), {10.0f * j, 10.0f * j + 1, 100.0f + j});
    }
    CHECK(out.to_vector<float>() == want);
    CHECK(a2a.batch_size_per_rank() == I64s{3, 3});

    // The all-to-all is a permutation, so its adjoint undoes it: x / world with division on.
    const GradientDivisionScope division(true);
    F32s half = local;
    for (float& x : half) {
        x /= 2;
    }
    CHECK(a2a.backward(out.clone()).to_vector<float>() == half);
}

TEST_CASE("PooledEmbeddingsAllToAll: random dims and batch per rank, forward and backward",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size();
    const int64_t me = pg->rank();
    for (uint64_t trial = 0; trial < 3; ++trial) {
        const uint64_t seed = test_seed() + 17 * trial;
        INFO("seed " << seed);
        const I64s dims = random_counts(seed, 1, world_size, 3);
        const I64s batches = random_counts(seed, 2, world_size, 3);
        const I64s dim_off = prefix(dims), row_off = prefix(batches);
        PooledEmbeddingsAllToAll a2a(pg, dims);
        const Tensor out = a2a.forward(make_matrix(seed, me, row_off.back(), dims[me]), batches);
        REQUIRE(out.shape() == Shape{batches[me], dim_off.back()});
        F32s want;
        for (int64_t b = 0; b < batches[me]; ++b) {
            for (int64_t s = 0; s < world_size; ++s) {
                for (int64_t c = 0; c < dims[s]; ++c) {
                    want.push_back(cell(seed, s, row_off[me] + b, c));
                }
            }
        }
        CHECK(out.to_vector<float>() == want);

        const bool divide = trial != 1;
        const GradientDivisionScope division(divide);
        const Tensor grad = make_matrix(seed + 1, me, batches[me], dim_off.back());
        const Tensor grad_in = a2a.backward(grad);
        REQUIRE(grad_in.shape() == Shape{row_off.back(), dims[me]});
        F32s want_grad;  // row (r, b), col c <- rank r's grad[b, dim_off[me] + c]
        for (int64_t r = 0; r < world_size; ++r) {
            for (int64_t b = 0; b < batches[r]; ++b) {
                for (int64_t c = 0; c < dims[me]; ++c) {
                    const float g = cell(seed + 1, r, b, dim_off[me] + c);
                    want_grad.push_back(divide ? g / static_cast<float>(world_size) : g);
                }
            }
        }
        CHECK(grad_in.to_vector<float>() == want_grad);
    }
}

TEST_CASE("PooledEmbeddingsAllToAll: a repeated step allocates nothing", "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size();
    const I64s dims(static_cast<size_t>(world_size), 2);
    PooledEmbeddingsAllToAll a2a(pg, dims);
    const Tensor local = make_matrix(1, pg->rank(), 2 * world_size, 2);
    const Tensor grad = make_matrix(2, pg->rank(), 2, 2 * world_size);
    const Tensor first = a2a.forward(local);
    a2a.backward(grad);
    const int64_t allocs = alloc_stats(DeviceType::kCpu).num_allocs;
    const Tensor second = a2a.forward(local);
    a2a.backward(grad);
    CHECK(alloc_stats(DeviceType::kCpu).num_allocs == allocs);
    CHECK(second.data_ptr() == first.data_ptr());
}

TEST_CASE("PooledEmbeddingsReduceScatter: variable rows per rank, forward and backward",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size();
    const int64_t me = pg->rank();
    for (uint64_t trial = 0; trial < 2; ++trial) {
        const uint64_t seed = test_seed() + 31 * trial;
        INFO("seed " << seed);
        const I64s rows = random_counts(seed, 3, world_size, 3);
        const I64s row_off = prefix(rows);
        const int64_t dim = 3;
        PooledEmbeddingsReduceScatter rs(pg);
        const Tensor out = rs.forward(make_matrix(seed, me, row_off.back(), dim), rows);
        REQUIRE(out.shape() == Shape{rows[me], dim});
        F32s want;
        for (int64_t b = 0; b < rows[me]; ++b) {
            for (int64_t c = 0; c < dim; ++c) {
                float sum = 0;
                for (int64_t s = 0; s < world_size; ++s) {
                    sum += cell(seed, s, row_off[me] + b, c);
                }
                want.push_back(sum);
            }
        }
        CHECK(out.to_vector<float>() == want);

        // Backward: an all-gather of every rank's grad, divided by world size (TorchRec).
        const bool divide = trial == 0;
        const GradientDivisionScope division(divide);
        const Tensor grad_in = rs.backward(make_matrix(seed + 1, me, rows[me], dim));
        REQUIRE(grad_in.shape() == Shape{row_off.back(), dim});
        F32s want_grad;
        for (int64_t r = 0; r < world_size; ++r) {
            for (int64_t b = 0; b < rows[r]; ++b) {
                for (int64_t c = 0; c < dim; ++c) {
                    const float g = cell(seed + 1, r, b, c);
                    want_grad.push_back(divide ? g / static_cast<float>(world_size) : g);
                }
            }
        }
        CHECK(grad_in.to_vector<float>() == want_grad);
    }
}

TEST_CASE("PooledEmbeddingsAllGather: variable batch per rank, forward and backward",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size();
    const int64_t me = pg->rank();
    const uint64_t seed = test_seed() + 5;
    const I64s batches = random_counts(seed, 4, world_size, 3);
    const I64s row_off = prefix(batches);
    const int64_t dim = 2;
    PooledEmbeddingsAllGather ag(pg);
    const Tensor out = ag.forward(make_matrix(seed, me, batches[me], dim), batches);
    F32s want;
    for (int64_t r = 0; r < world_size; ++r) {
        for (int64_t b = 0; b < batches[r]; ++b) {
            for (int64_t c = 0; c < dim; ++c) {
                want.push_back(cell(seed, r, b, c));
            }
        }
    }
    CHECK(out.shape() == Shape{row_off.back(), dim});
    CHECK(out.to_vector<float>() == want);

    const GradientDivisionScope division(true);
    const Tensor grad_in = ag.backward(make_matrix(seed + 1, me, row_off.back(), dim));
    F32s want_grad;  // the sum over ranks of their grad rows of my block, / world
    for (int64_t b = 0; b < batches[me]; ++b) {
        for (int64_t c = 0; c < dim; ++c) {
            float sum = 0;
            for (int64_t s = 0; s < world_size; ++s) {
                sum += cell(seed + 1, s, row_off[me] + b, c);
            }
            want_grad.push_back(sum / static_cast<float>(world_size));
        }
    }
    CHECK(grad_in.shape() == Shape{batches[me], dim});
    CHECK(grad_in.to_vector<float>() == want_grad);
}
