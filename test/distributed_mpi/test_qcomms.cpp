// Quantized pooled collectives over real ranks (QCommsConfig, kernels/qcomm_codec.h): with fp16,
// bf16 and fp8 forward and backward precision, the all-to-all, reduce-scatter and all-gather and
// their backwards give the f32 collectives' results within the codec's bound, per element:
//   fp16 2^-11 |x| + 2^-25, bf16 2^-8 |x|, fp8 2^-4 amax of the row (one sample's columns of one
//   rank's block), each summed over the ranks' terms where the collective adds (in f32, +
//   (world + 1) 2^-24 of the magnitude for the f32 sum and the gradient division);
// and the bytes they send: half of f32's for fp16 and bf16, (D + 4) / 4D of it for fp8.
// Values are random with magnitudes over 2^-8..2^8, so the bounds are met by rounding, not luck.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/rng.h"
#include "engine/distributed/pooled_embeddings.h"
#include "test/distributed_mpi/dist_mpi_util.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using kernels::CommType;
using I64s = std::vector<int64_t>;

namespace {

// The (seed, rank, row, col) value of a rank's tensor.
float cell(uint64_t seed, int64_t rank, int64_t row, int64_t col) {
    const double u = rng::uniform(seed, static_cast<uint64_t>(rank), static_cast<uint64_t>(row),
                                  static_cast<uint64_t>(col));
    const double v = std::ldexp(1.0 + std::fmod(u * 7919.0, 1.0), static_cast<int>(u * 16) - 8);
    return static_cast<float>(u < 0.5 ? -v : v);
}

Tensor make_matrix(uint64_t seed, int64_t rank, int64_t rows, int64_t cols) {
    std::vector<float> v;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            v.push_back(cell(seed, rank, r, c));
    return Tensor::from_vector(v, {rows, cols});
}

I64s prefix(const I64s& v) {
    I64s out(v.size() + 1, 0);
    for (size_t i = 0; i < v.size(); ++i)
        out[i + 1] = out[i] + v[i];
    return out;
}

// The codec's error bound for one value x of a row whose amax is `amax`.
double codec_bound(CommType type, double x, double amax) {
    switch (type) {
        case CommType::kFp16:
            return 0x1p-11 * std::fabs(x) + 0x1p-25;
        case CommType::kBf16:
            return 0x1p-8 * std::fabs(x);
        case CommType::kFp8:
            return 0x1p-4 * amax;
        case CommType::kFp32:
            break;
    }
    return 0;
}

// Checks got within `bound[i]` of want (the f32 collective's result), reporting the worst.
void check_within(const Tensor& got, const Tensor& want, const std::vector<double>& bound) {
    const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    REQUIRE(g.size() == w.size());
    REQUIRE(bound.size() == w.size());
    size_t worst = 0, bad = 0;
    double worst_ratio = 0;
    for (size_t i = 0; i < g.size(); ++i) {
        const double err = std::fabs(static_cast<double>(g[i]) - w[i]);
        const double ratio = bound[i] > 0 ? err / bound[i] : (err > 0 ? 1e300 : 0);
        if (ratio > 1)
            ++bad;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    INFO(bad << " of " << g.size() << " out of bound; worst [" << worst << "] got "
             << (g.empty() ? 0 : g[worst]) << " want " << (w.empty() ? 0 : w[worst]) << " bound "
             << (bound.empty() ? 0 : bound[worst]) << " (" << worst_ratio << "x)");
    CHECK(bad == 0);
}

double row_amax(uint64_t seed, int64_t rank, int64_t row, int64_t col0, int64_t cols) {
    double m = 0;
    for (int64_t c = col0; c < col0 + cols; ++c)
        m = std::max(m, std::fabs(static_cast<double>(cell(seed, rank, row, c))));
    return m;
}

const CommType kTypes[] = {CommType::kFp16, CommType::kBf16, CommType::kFp8};

}  // namespace

TEST_CASE("qcomms: PooledEmbeddingsAllToAll matches f32 within the codec bound",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size(), me = pg->rank();
    const double w = static_cast<double>(world_size);
    for (CommType type : kTypes) {
        const uint64_t seed = test_seed() + static_cast<uint64_t>(type);
        INFO("seed " << seed << " type " << kernels::comm_type_name(type));
        I64s dims, batches;
        rng::Rng gen(seed, 9);
        for (int64_t r = 0; r < world_size; ++r) {
            dims.push_back(r == 1 ? 0 : gen.randint(1, 40));  // rank 1 owns no columns
            batches.push_back(gen.randint(0, 6));
        }
        const I64s dim_off = prefix(dims), row_off = prefix(batches);
        PooledEmbeddingsAllToAll f32(pg, dims);
        PooledEmbeddingsAllToAll q(pg, dims, QCommsConfig{type, type});
        const Tensor local = make_matrix(seed, me, row_off.back(), dims[me]);
        const Tensor want = f32.forward(local, batches).clone();
        const Tensor got = q.forward(local, batches);
        std::vector<double> bound;
        for (int64_t b = 0; b < batches[me]; ++b)
            for (int64_t s = 0; s < world_size; ++s)
                for (int64_t c = 0; c < dims[s]; ++c)
                    bound.push_back(codec_bound(type, cell(seed, s, row_off[me] + b, c),
                                                row_amax(seed, s, row_off[me] + b, 0, dims[s])));
        check_within(got, want, bound);

        // Backward: rank r's gradients for my columns, divided by the world size.
        const GradientDivisionScope division(true);
        const Tensor grad = make_matrix(seed + 1, me, batches[me], dim_off.back());
        const Tensor want_grad = f32.backward(grad).clone();
        const Tensor got_grad = q.backward(grad);
        std::vector<double> grad_bound;
        for (int64_t r = 0; r < world_size; ++r)
            for (int64_t b = 0; b < batches[r]; ++b)
                for (int64_t c = 0; c < dims[me]; ++c)
                    grad_bound.push_back(
                        (codec_bound(type, cell(seed + 1, r, b, dim_off[me] + c),
                                     row_amax(seed + 1, r, b, dim_off[me], dims[me])) +
                         0x1p-23 * std::fabs(cell(seed + 1, r, b, dim_off[me] + c))) /
                        w);
        check_within(got_grad, want_grad, grad_bound);

        // Bytes: 2 of 4 per value for fp16 and bf16; D + 4 of 4D per row for fp8.
        const CommBytes f = f32.sent_bytes(), g = q.sent_bytes();
        if (type == CommType::kFp8) {
            const int64_t rows_out = row_off.back() - batches[me];
            CHECK(g.forward == (dims[me] == 0 ? 0 : rows_out * (dims[me] + 4)));
            CHECK(f.forward == rows_out * dims[me] * 4);
        } else {
            CHECK(2 * g.forward == f.forward);
            CHECK(2 * g.backward == f.backward);
        }
    }
}

TEST_CASE("qcomms: PooledEmbeddingsReduceScatter and AllGather match f32 within the codec bound",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size(), me = pg->rank();
    const double w = static_cast<double>(world_size);
    for (CommType type : kTypes) {
        const uint64_t seed = test_seed() + 100 + static_cast<uint64_t>(type);
        INFO("seed " << seed << " type " << kernels::comm_type_name(type));
        rng::Rng gen(seed, 3);
        I64s rows;
        for (int64_t r = 0; r < world_size; ++r)
            rows.push_back(gen.randint(0, 5));
        const I64s row_off = prefix(rows);
        const int64_t dim = 19;
        const GradientDivisionScope division(true);

        // Reduce-scatter: each rank's encoded block, summed in f32 after decoding.
        PooledEmbeddingsReduceScatter rs32(pg), rsq(pg, QCommsConfig{type, type});
        const Tensor local = make_matrix(seed, me, row_off.back(), dim);
        const Tensor want = rs32.forward(local, rows).clone();
        const Tensor got = rsq.forward(local, rows);
        std::vector<double> bound;
        for (int64_t b = 0; b < rows[me]; ++b) {
            for (int64_t c = 0; c < dim; ++c) {
                double sum = 0, mag = 0;
                for (int64_t s = 0; s < world_size; ++s) {
                    const double x = cell(seed, s, row_off[me] + b, c);
                    sum += codec_bound(type, x, row_amax(seed, s, row_off[me] + b, 0, dim));
                    mag += std::fabs(x);
                }
                bound.push_back(sum + (w + 1) * 0x1p-24 * mag);
            }
        }
        check_within(got, want, bound);
        // Its backward, an all-gather of the gradients.
        const Tensor grad = make_matrix(seed + 1, me, rows[me], dim);
        const Tensor want_grad = rs32.backward(grad).clone();
        const Tensor got_grad = rsq.backward(grad);
        std::vector<double> grad_bound;
        for (int64_t r = 0; r < world_size; ++r)
            for (int64_t b = 0; b < rows[r]; ++b)
                for (int64_t c = 0; c < dim; ++c) {
                    const double x = cell(seed + 1, r, b, c);
                    grad_bound.push_back((codec_bound(type, x, row_amax(seed + 1, r, b, 0, dim)) +
                                          0x1p-23 * std::fabs(x)) /
                                         w);
                }
        check_within(got_grad, want_grad, grad_bound);

        // All-gather forward, and its backward (a reduce-scatter) over the same rows.
        PooledEmbeddingsAllGather ag32(pg), agq(pg, QCommsConfig{type, type});
        const Tensor mine = make_matrix(seed + 2, me, rows[me], dim);
        const Tensor want_ag = ag32.forward(mine, rows).clone();
        const Tensor got_ag = agq.forward(mine, rows);
        std::vector<double> ag_bound;
        for (int64_t r = 0; r < world_size; ++r)
            for (int64_t b = 0; b < rows[r]; ++b)
                for (int64_t c = 0; c < dim; ++c)
                    ag_bound.push_back(codec_bound(type, cell(seed + 2, r, b, c),
                                                   row_amax(seed + 2, r, b, 0, dim)));
        check_within(got_ag, want_ag, ag_bound);
        const Tensor ag_grad = make_matrix(seed + 3, me, row_off.back(), dim);
        const Tensor want_agb = ag32.backward(ag_grad).clone();
        const Tensor got_agb = agq.backward(ag_grad);
        std::vector<double> agb_bound;
        for (int64_t b = 0; b < rows[me]; ++b) {
            for (int64_t c = 0; c < dim; ++c) {
                double sum = 0, mag = 0;
                for (int64_t s = 0; s < world_size; ++s) {
                    const double x = cell(seed + 3, s, row_off[me] + b, c);
                    sum += codec_bound(type, x, row_amax(seed + 3, s, row_off[me] + b, 0, dim));
                    mag += std::fabs(x);
                }
                agb_bound.push_back((sum + (w + 2) * 0x1p-24 * mag) / w);
            }
        }
        check_within(got_agb, want_agb, agb_bound);
        if (type != CommType::kFp8) {
            CHECK(2 * rsq.sent_bytes().forward == rs32.sent_bytes().forward);
            CHECK(2 * agq.sent_bytes().backward == ag32.sent_bytes().backward);
            CHECK(2 * agq.sent_bytes().forward == ag32.sent_bytes().forward);
        }
    }
}
