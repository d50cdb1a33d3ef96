// all_gather_kjt over real ranks: random KJTs with a batch per rank drawn from the seed (0 to 3
// samples, so some ranks send nothing), gathered with the weights ([N] payload) and with a
// [N, 3] payload of rows from (rank, index, column). Every rank computes the global batch
// locally from the seeds: per key, the bags of rank 0, then rank 1, ..., each id with its
// payload. Called twice, so the grow-only buffers are reused.
#include <catch2/catch.hpp>

#include "engine/distributed/kjt_all_gather.h"
#include "test/distributed_mpi/dist_mpi_util.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::test;
using I64s = std::vector<int64_t>;
using F32s = std::vector<float>;

namespace {

constexpr int64_t kWidth = 3;

float row_value(int64_t rank, int64_t index, int64_t col) {
    return static_cast<float>(rank * 1000 + index * kWidth + col);
}

}  // namespace

TEST_CASE("all_gather_kjt gathers every rank's KJT in global sample order", "[distributed][mpi]") {
    const auto pg = world();
    const int world_size = pg->size(), me = pg->rank();
    KJTAllGatherBuffers buf;
    for (uint64_t round = 0; round < 2; ++round) {
        const uint64_t seed = test_seed() + round;
        INFO("seed " << seed);
        RandomKjtSpec spec;
        spec.weighted = true;
        const std::vector<RankInput> inputs = random_inputs(seed, world_size, spec);
        // The global batch, computed locally: key-major, then rank, sample and position.
        I64s want_offsets = {0}, want_values, want_batches;
        F32s want_weights, want_rows;
        for (const RankInput& in : inputs)
            want_batches.push_back(in.batch);
        for (int64_t f = 0; f < spec.num_keys; ++f) {
            for (int64_t r = 0; r < world_size; ++r) {
                const RankInput& in = inputs[static_cast<size_t>(r)];
                // The index in rank r's values of the first id of key f.
                int64_t index = 0;
                for (int64_t g = 0; g < f; ++g) {
                    for (const auto& bag : in.ids[static_cast<size_t>(g)])
                        index += static_cast<int64_t>(bag.size());
                }
                for (int64_t b = 0; b < in.batch; ++b) {
                    const auto& ids = in.ids[static_cast<size_t>(f)][static_cast<size_t>(b)];
                    const auto& w = in.weights[static_cast<size_t>(f)][static_cast<size_t>(b)];
                    for (size_t j = 0; j < ids.size(); ++j, ++index) {
                        want_values.push_back(ids[j]);
                        want_weights.push_back(w[j]);
                        for (int64_t c = 0; c < kWidth; ++c)
                            want_rows.push_back(row_value(r, index, c));
                    }
                    want_offsets.push_back(static_cast<int64_t>(want_values.size()));
                }
            }
        }
        const KeyedJaggedTensor mine = inputs[static_cast<size_t>(me)].kjt();
        const int64_t n_mine = mine.values().numel();
        F32s rows;
        for (int64_t i = 0; i < n_mine; ++i) {
            for (int64_t c = 0; c < kWidth; ++c)
                rows.push_back(row_value(me, i, c));
        }
        const Tensor payload = Tensor::from_vector(rows, {n_mine, kWidth});
        for (const bool with_rows : {false, true}) {
            INFO("payload " << (with_rows ? "rows" : "weights"));
            const GatheredKJT got =
                all_gather_kjt(*pg, mine, with_rows ? &payload : &mine.weights(), buf);
            CHECK(got.batch_size_per_rank == want_batches);
            CHECK(got.stride == static_cast<int64_t>(want_offsets.size() - 1) / spec.num_keys);
            CHECK(ivec(got.offsets) == want_offsets);
            CHECK(ivec(got.values) == want_values);
            REQUIRE(got.payload.defined());
            if (with_rows) {
                CHECK(got.payload.shape() ==
                      Shape({static_cast<int64_t>(want_values.size()), kWidth}));
                CHECK(got.payload.to_vector<float>() == want_rows);
            } else {
                CHECK(got.payload.to_vector<float>() == want_weights);
            }
        }
        const GatheredKJT no_payload = all_gather_kjt(*pg, mine, nullptr, buf);
        CHECK_FALSE(no_payload.payload.defined());
        CHECK(ivec(no_payload.values) == want_values);
    }
}
