// QuantizedRowFetch over real ranks: row-sharded quantized tables (uneven row blocks, empty ones,
// ranks in any order) pooled on the ranks of the samples give bitwise what
// QuantEmbeddingBagCollection gives in one process over the whole tables, for every stored type
// (f32 rows most of all: their sums round differently in another order), SUM and MEAN, weighted
// or not, a table serving two features, long bags, empty bags and an empty batch.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "engine/core/rng.h"
#include "engine/distributed/quantized_row_fetch.h"
#include "engine/modules/quant_embedding_bag_collection.h"
#include "test/distributed_mpi/dist_mpi_util.h"

using namespace shardrec;
using namespace shardrec::test;
using kernels::QuantType;

namespace {

constexpr int64_t kRows = 41;  // every table; ids are uniform over them

struct TableSpec {
    QuantType type;
    int64_t dim;
    std::vector<std::string> features;
    PoolingMode pooling;
};

const std::vector<TableSpec> kTables = {
    {QuantType::kF32, 8, {"f0", "f3"}, PoolingMode::kSum},
    {QuantType::kInt8, 12, {"f1"}, PoolingMode::kMean},
    {QuantType::kInt4, 16, {"f2"}, PoolingMode::kSum},
    {QuantType::kFp8, 5, {"f4"}, PoolingMode::kSum},
    {QuantType::kF16, 4, {"f5"}, PoolingMode::kMean},
};

// Table t's rows as stored: random f32 rows of several magnitudes, quantized.
Tensor stored_rows(uint64_t seed, size_t t) {
    const TableSpec& spec = kTables[t];
    Tensor f32 = Tensor::empty({kRows, spec.dim}, DType::kF32);
    for (int64_t i = 0; i < f32.numel(); ++i) {
        const double u = rng::uniform(seed, t, static_cast<uint64_t>(i));
        f32.data<float>()[i] = static_cast<float>((u - 0.5) * std::ldexp(1.0, (i * 7) % 9 - 4));
    }
    Tensor out = Tensor::empty({kRows * kernels::quant_row_bytes(spec.type, spec.dim)}, DType::kU8);
    kernels::quantize_rows(f32, spec.type, out, Stream::cpu());
    return out;
}

// Row blocks of table t over the world: random cut points (empty blocks too), each block on a
// rank drawn from the seed (a rank may hold none, or several).
std::vector<QuantizedRowFetch::Shard> shards(
    uint64_t seed, size_t t, const Tensor& rows, int me, int world) {
    const int64_t n = 1 + static_cast<int64_t>(rng::hash(seed, 100 + t) % (2 * world));
    std::vector<int64_t> cuts = {0, kRows};
    for (int64_t i = 0; i < n - 1; ++i)
        cuts.push_back(static_cast<int64_t>(rng::hash(seed, 200 + t, i) % (kRows + 1)));
    std::sort(cuts.begin(), cuts.end());
    const int64_t row_bytes = rows.numel() / kRows;
    std::vector<QuantizedRowFetch::Shard> out;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        QuantizedRowFetch::Shard s;
        s.row_offset = cuts[i];
        s.rows = cuts[i + 1] - cuts[i];
        s.rank = static_cast<int>(rng::hash(seed, 300 + t, i) % static_cast<uint64_t>(world));
        if (s.rank == me && s.rows > 0) {
            s.stored = Tensor::empty({s.rows * row_bytes}, DType::kU8);
            std::memcpy(s.stored.data_ptr(), rows.data<uint8_t>() + s.row_offset * row_bytes,
                        static_cast<size_t>(s.rows * row_bytes));
        }
        out.push_back(std::move(s));
    }
    std::reverse(out.begin(), out.end());  // any order
    return out;
}

}  // namespace

TEST_CASE("QuantizedRowFetch: row-sharded quantized tables pool as one process", "[mpi]") {
    const auto pg = world();
    for (const bool weighted : {false, true}) {
        for (uint64_t seed = 1; seed <= 4; ++seed) {
            INFO("seed " << seed << (weighted ? ", weighted" : ""));
            std::vector<QuantTable> whole;
            std::vector<QuantizedRowFetch::Table> tables;
            std::vector<QuantizedRowFetch::Feature> features;
            int64_t col = 0;
            for (size_t t = 0; t < kTables.size(); ++t) {
                const TableSpec& spec = kTables[t];
                const Tensor rows = stored_rows(seed, t);
                QuantTable q;
                q.config = {"t" + std::to_string(t), kRows, spec.dim, spec.features, spec.pooling};
                q.type = spec.type;
                q.rows = rows;
                whole.push_back(q);
                tables.push_back({q.config.name, spec.type, kRows, spec.dim,
                                  shards(seed, t, rows, pg->rank(), pg->size())});
                for (const std::string& f : spec.features) {
                    features.push_back({f, static_cast<int64_t>(t), spec.pooling, col});
                    col += spec.dim;
                }
            }
            RandomKjtSpec spec;
            spec.num_keys = 6;
            spec.max_batch = 16;
            spec.max_len = 20;
            spec.weighted = weighted;
            spec.id_range = kRows;
            KeyedJaggedTensor kjt = random_rank_input(seed, pg->rank(), spec).kjt();
            // The random KJT's keys are k0..k5: name them as the features.
            std::vector<std::string> names = {"f0", "f1", "f2", "f3", "f4", "f5"};
            kjt = KeyedJaggedTensor::from_lengths_sync(names, kjt.values(), kjt.lengths(),
                                                       kjt.weights_or_none(), kjt.stride());
            QuantEmbeddingBagCollection qebc(whole, weighted);
            const Tensor want = qebc.forward(kjt).values();

            QuantizedRowFetch fetch(pg, tables, features);
            Tensor got = Tensor::empty({kjt.stride(), col + 2}, DType::kF32);
            std::fill_n(got.data<float>(), got.numel(), 7.0f);
            fetch.forward(kjt, got);
            REQUIRE(want.size(1) == col);
            for (int64_t b = 0; b < kjt.stride(); ++b) {
                INFO("sample " << b);
                CHECK(std::memcmp(got.data<float>() + b * (col + 2), want.data<float>() + b * col,
                                  sizeof(float) * static_cast<size_t>(col)) == 0);
                CHECK(got.data<float>()[b * (col + 2) + col] == 7.0f);
                CHECK(got.data<float>()[b * (col + 2) + col + 1] == 7.0f);
            }
        }
    }
}

TEST_CASE("QuantizedRowFetch: an id past its table is an error naming it", "[mpi]") {
    const auto pg = world();
    const Tensor rows = stored_rows(1, 1);
    std::vector<QuantizedRowFetch::Table> tables = {
        {"t1", QuantType::kInt8, kRows, 12, shards(1, 1, rows, pg->rank(), pg->size())}};
    QuantizedRowFetch fetch(pg, tables, {{"f1", 0, PoolingMode::kSum, 0}});
    const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_sync(
        {"f1"}, Tensor::from_vector<int64_t>({3, kRows}), Tensor::from_vector<int64_t>({2}));
    Tensor out = Tensor::zeros({1, 12}, DType::kF32);
    CHECK_THROWS_WITH(fetch.forward(kjt, out),
                      Catch::Contains("feature 'f1': id 41 is outside the 41 rows of table 't1'"));
}
