// SequenceEmbeddingsAllToAll over real ranks, table-wise: ids go out through KJTAllToAll, a
// host-loop "table" gives each id a row, and the rows must come back to the rank and the value
// position each id came from; the backward must send each gradient row to the id's owner.
#include <catch2/catch.hpp>

#include "engine/core/rng.h"
#include "engine/distributed/kjt_all_to_all.h"
#include "engine/distributed/sequence_embeddings.h"
#include "test/distributed_mpi/dist_mpi_util.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using I64s = std::vector<int64_t>;
using F32s = std::vector<float>;

namespace {

// The row of (key, id) in the host "table", and gradient values: multiples of 1/2.
float cell(uint64_t seed, int64_t a, int64_t b, int64_t c) {
    const uint64_t h = rng::hash(seed, static_cast<uint64_t>(a), static_cast<uint64_t>(b),
                                 static_cast<uint64_t>(c));
    return static_cast<float>(static_cast<int64_t>(h % 23) - 11) * 0.5f;
}

int64_t key_number(const std::string& key) {
    return std::stoll(key.substr(1));  // "f7" -> 7
}

}  // namespace

TEST_CASE("SequenceEmbeddingsAllToAll: table-wise round trip, forward and backward",
          "[distributed][mpi]") {
    const auto pg = world();
    const int64_t world_size = pg->size();
    const int64_t me = pg->rank();
    const int64_t dim = 3;
    for (uint64_t trial = 0; trial < 3; ++trial) {
        const uint64_t seed = test_seed() + 7 * trial;
        INFO("seed " << seed);
        RandomKjtSpec spec;
        spec.num_keys = 2 + static_cast<int64_t>(trial);
        spec.min_batch = trial == 2 ? 0 : 1;
        const std::vector<RankInput> inputs = random_inputs(seed, world_size, spec);
        const I64s splits = random_splits(seed, spec.num_keys, world_size);
        const KeyedJaggedTensor mine = inputs[me].kjt();
        KJTAllToAllSplitsAwaitable awaitable = KJTAllToAll(pg, splits).start(mine);
        const KeyedJaggedTensor local = awaitable.wait();

        // Lookup: one row per local id.
        F32s rows;
        for (const auto& [key, jt] : local.to_dict()) {
            for (int64_t id : ivec(jt.values())) {
                for (int64_t d = 0; d < dim; ++d) {
                    rows.push_back(cell(seed, key_number(key), id, d));
                }
            }
        }
        const Tensor local_embs =
            Tensor::from_vector(rows, {static_cast<int64_t>(rows.size()) / dim, dim});
        SequenceEmbeddingsAllToAll seq(pg, splits);
        const Tensor out = seq.forward(local_embs, local.lengths(), awaitable.splits());
        F32s want;
        for (const auto& [key, jt] : mine.to_dict()) {
            for (int64_t id : ivec(jt.values())) {
                for (int64_t d = 0; d < dim; ++d) {
                    want.push_back(cell(seed, key_number(key), id, d));
                }
            }
        }
        CHECK(out.shape() == Shape{mine.values().numel(), dim});
        CHECK(out.to_vector<float>() == want);

        // Backward: value i of rank s gets gradient row cell(seed + 1, s, i, :); each local id
        // (rank * kRankIdBase + i) must receive its source's row, divided by world size.
        const GradientDivisionScope division(true);
        F32s grad;
        for (int64_t i = 0; i < mine.values().numel(); ++i) {
            for (int64_t d = 0; d < dim; ++d) {
                grad.push_back(cell(seed + 1, me, i, d));
            }
        }
        const Tensor grad_in =
            seq.backward(Tensor::from_vector(grad, {mine.values().numel(), dim}));
        F32s want_grad;
        for (int64_t id : ivec(local.values())) {
            for (int64_t d = 0; d < dim; ++d) {
                want_grad.push_back(
                    cell(seed + 1, id / RankInput::kRankIdBase, id % RankInput::kRankIdBase, d) /
                    static_cast<float>(world_size));
            }
        }
        CHECK(grad_in.shape() == local_embs.shape());
        CHECK(grad_in.to_vector<float>() == want_grad);
    }
}
