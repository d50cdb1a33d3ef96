// Hierarchical output dists (hierarchical_pooled.h) against the flat ones over real ranks, with
// nodes of two ranks where the world is even (np 4: two nodes; np 2: one node; np 1 and 3:
// nodes of one rank): the TWRW all-to-all's summed outputs and its backward are bitwise the flat
// ones; the row-wise reduce-scatter is bitwise on dyadic values (every order exact), within f32
// rounding on random ones, and its backward is bitwise; quantized, the cross-node step halves its
// bytes with fp16. The bytes to other nodes shrink by the node size (checked where the flat
// modules see the same nodes: test_distributed_mpi_np4_local2, SHARDREC_LOCAL_SIZE=2).
#include <catch2/catch.hpp>
#include <cmath>

#include "comm/mpi_env.h"
#include "engine/core/rng.h"
#include "engine/distributed/hierarchical_pooled.h"
#include "engine/distributed/pooled_embeddings.h"
#include "test/distributed_mpi/dist_mpi_util.h"

using namespace shardrec;
using namespace shardrec::test;
using I64s = std::vector<int64_t>;

namespace {

// Random values of magnitude 2^-8..2^8 (sums round), or dyadic ones (sums exact).
Tensor make_matrix(uint64_t seed, int64_t rank, int64_t rows, int64_t cols, bool dyadic = false) {
    std::vector<float> v;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const double u = rng::uniform(seed, static_cast<uint64_t>(rank),
                                          static_cast<uint64_t>(r), static_cast<uint64_t>(c));
            const double x =
                dyadic ? std::floor(u * 64) / 4 - 8
                       : std::ldexp(1.0 + std::fmod(u * 7919.0, 1.0), static_cast<int>(u * 16) - 8);
            v.push_back(static_cast<float>(u < 0.5 && !dyadic ? -x : x));
        }
    }
    return Tensor::from_vector(v, {rows, cols});
}

std::vector<float> values(const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// The emulated node size when SHARDREC_LOCAL_SIZE splits the world (the flat modules count
// cross-node bytes with it), else 2 where the world is even.
int test_local_size(int world) {
    const int launched = comm::process_info().local_size;
    if (launched < world)
        return launched;
    return world % 2 == 0 ? 2 : 1;
}

// Whether the flat modules see the same nodes (their cross-node bytes are comparable).
bool flat_sees_nodes(int local_size) {
    return comm::process_info().local_size == local_size;
}

I64s batches(int world, uint64_t seed) {
    I64s b;
    for (int r = 0; r < world; ++r)
        b.push_back(1 + static_cast<int64_t>(rng::uniform(seed, 99, static_cast<uint64_t>(r)) * 4));
    return b;
}

float world_sum(comm::ProcessGroup& pg, int64_t bytes) {
    Tensor t = Tensor::from_vector<float>({static_cast<float>(bytes)});
    pg.all_reduce(t, comm::ReduceOp::kSum).wait();
    return t.data<float>()[0];
}

// Each output's sum as the collection forms it: from zero, segment by segment in rank order.
// outputs: the tie of every segment (>= 0), or a fresh output (-1).
std::vector<float> collect(const Tensor& out,
                           const std::vector<std::vector<PooledSegment>>& segs,
                           int64_t num_outputs,
                           int64_t dim) {
    const int64_t B = out.size(0);
    std::vector<float> acc(static_cast<size_t>(B * num_outputs * dim), 0.0f);
    int64_t col = 0, fresh = 0;
    int64_t ties = 0;
    for (const auto& rank : segs) {
        for (const PooledSegment& s : rank)
            ties = std::max(ties, s.tie + 1);
    }
    for (const auto& rank : segs) {
        for (const PooledSegment& s : rank) {
            const int64_t o = s.tie >= 0 ? s.tie : ties + fresh++;
            for (int64_t b = 0; b < B; ++b) {
                for (int64_t j = 0; j < s.cols; ++j) {
                    acc[static_cast<size_t>((b * num_outputs + o) * dim + j)] +=
                        out.data<float>()[b * out.size(1) + col + j];
                }
            }
            col += s.cols;
        }
    }
    return acc;
}

}  // namespace

TEST_CASE("HierarchicalReduceScatter: equals the flat reduce-scatter, fewer cross-node bytes",
          "[distributed][mpi]") {
    auto pg = world();
    const int W = pg->size(), me = pg->rank(), L = test_local_size(W);
    NodeGroups nodes = make_node_groups(*pg, L);
    const int64_t D = 3;
    for (const bool dyadic : {true, false}) {
        for (const bool even : {true, false}) {
            const I64s splits = even ? I64s(static_cast<size_t>(W), 3) : batches(W, 7);
            int64_t rows = 0;
            for (int64_t s : splits)
                rows += s;
            const Tensor in = make_matrix(11, me, rows, D, dyadic);
            PooledEmbeddingsReduceScatter flat(pg);
            HierarchicalReduceScatter hier(nodes);
            const std::vector<float> f = values(flat.forward(in, splits));
            const std::vector<float> h = values(hier.forward(in, splits));
            REQUIRE(f.size() == h.size());
            for (size_t i = 0; i < f.size(); ++i) {
                if (dyadic)
                    CHECK(f[i] == h[i]);
                else
                    CHECK(h[i] == Approx(f[i]).epsilon(W * 0x1p-23).margin(W * 0x1p-30));
            }
            const Tensor g = make_matrix(13, me, splits[static_cast<size_t>(me)], D);
            CHECK(values(flat.backward(g)) == values(hier.backward(g)));
            if (even && W / L > 1 &&
                flat_sees_nodes(L)) {  // one sum per node pair: L times fewer bytes cross
                CHECK(flat.sent_bytes().forward_cross_node ==
                      L * hier.sent_bytes().forward_cross_node);
                CHECK(hier.sent_bytes().forward_cross_node > 0);
                CHECK(flat.sent_bytes().backward_cross_node ==
                      L * hier.sent_bytes().backward_cross_node);
            }
        }
    }
}

TEST_CASE("HierarchicalPooledAllToAll: TWRW sums bitwise the flat ones, fewer cross-node bytes",
          "[distributed][mpi]") {
    auto pg = world();
    const int W = pg->size(), me = pg->rank(), L = test_local_size(W);
    NodeGroups nodes = make_node_groups(*pg, L);
    const int64_t D = 4;
    // Every rank: one table_wise column block of its own, then a TWRW shard of its node's table
    // (tie = node); rank 0 also a second TW output.
    std::vector<std::vector<PooledSegment>> segs(static_cast<size_t>(W));
    const int nodes_n = W / L;
    int64_t fresh = 0;
    for (int r = 0; r < W; ++r) {
        segs[static_cast<size_t>(r)].push_back({D, -1});
        ++fresh;
        segs[static_cast<size_t>(r)].push_back({D, r / L});
        if (r == 0) {
            segs[0].push_back({D, -1});
            ++fresh;
        }
    }
    std::vector<int64_t> dims;
    for (const auto& s : segs) {
        int64_t d = 0;
        for (const auto& x : s)
            d += x.cols;
        dims.push_back(d);
    }
    const I64s B = batches(W, 5);
    int64_t global = 0;
    for (int64_t b : B)
        global += b;
    const Tensor in = make_matrix(17, me, global, dims[static_cast<size_t>(me)]);
    PooledEmbeddingsAllToAll flat(pg, dims);
    HierarchicalPooledAllToAll hier(nodes, segs);
    const Tensor fo = flat.forward(in, B);
    const Tensor ho = hier.forward(in, B);
    REQUIRE(fo.shape() == ho.shape());
    const int64_t outputs = nodes_n + fresh;
    CHECK(collect(fo, segs, outputs, D) == collect(ho, segs, outputs, D));
    // Backward: the tied segments carry their output's gradient.
    const Tensor go_out = make_matrix(19, me, B[static_cast<size_t>(me)], outputs * D);
    Tensor grad = Tensor::zeros({B[static_cast<size_t>(me)], fo.size(1)}, DType::kF32);
    int64_t col = 0, f = 0;
    for (const auto& rank : segs) {
        for (const PooledSegment& s : rank) {
            const int64_t o = s.tie >= 0 ? s.tie : nodes_n + f++;
            for (int64_t b = 0; b < grad.size(0); ++b) {
                for (int64_t j = 0; j < s.cols; ++j)
                    grad.data<float>()[b * grad.size(1) + col + j] =
                        go_out.data<float>()[(b * outputs + o) * D + j];
            }
            col += s.cols;
        }
    }
    CHECK(values(flat.backward(grad)) == values(hier.backward(grad)));
    if (nodes_n > 1 && flat_sees_nodes(L)) {  // over all ranks: a rank sends its node's sums
        CHECK(world_sum(*pg, hier.sent_bytes().forward_cross_node) <
              world_sum(*pg, flat.sent_bytes().forward_cross_node));
        CHECK(world_sum(*pg, hier.sent_bytes().backward_cross_node) <
              world_sum(*pg, flat.sent_bytes().backward_cross_node));
    }
    // fp16 on the cross-node step: half its bytes, the values within fp16's rounding.
    HierarchicalPooledAllToAll half(
        nodes, segs, QCommsConfig{kernels::CommType::kFp16, kernels::CommType::kFp16});
    const std::vector<float> q = collect(half.forward(in, B), segs, outputs, D);
    const std::vector<float> e = collect(fo, segs, outputs, D);
    for (size_t i = 0; i < q.size(); ++i)
        CHECK(q[i] == Approx(e[i]).epsilon(0x1p-10).margin(0x1p-20));
    const std::vector<float> qg = values(half.backward(grad));
    const std::vector<float> eg = values(flat.backward(grad));
    for (size_t i = 0; i < qg.size(); ++i)
        CHECK(qg[i] == Approx(eg[i]).epsilon(0x1p-10).margin(0x1p-20));
    CHECK(2 * half.sent_bytes().forward_cross_node == hier.sent_bytes().forward_cross_node);
}

TEST_CASE("HierarchicalReduceScatter: fp16 across nodes within fp16 rounding, half the bytes",
          "[distributed][mpi]") {
    auto pg = world();
    const int W = pg->size(), me = pg->rank(), L = test_local_size(W);
    NodeGroups nodes = make_node_groups(*pg, L);
    const I64s splits(static_cast<size_t>(W), 2);
    const Tensor in = make_matrix(23, me, 2 * W, 5);
    PooledEmbeddingsReduceScatter flat(pg);
    HierarchicalReduceScatter hier(nodes);
    HierarchicalReduceScatter half(
        nodes, QCommsConfig{kernels::CommType::kFp16, kernels::CommType::kFp16});
    const std::vector<float> f = values(flat.forward(in, splits));
    (void)hier.forward(in, splits);
    const std::vector<float> h = values(half.forward(in, splits));
    for (size_t i = 0; i < f.size(); ++i)
        CHECK(h[i] == Approx(f[i]).epsilon(W * 0x1p-10).margin(W * 0x1p-20));
    CHECK(2 * half.sent_bytes().forward_cross_node == hier.sent_bytes().forward_cross_node);
}
