// SyntheticDataset: samples are pure functions of (seed, split, index) (determinism, slicing
// invariance, disjoint eval stream), the generated layout is in range, and the planted signal is
// there: the teacher's AUC is 0.85-0.9 and a one-hot logistic model learns most of it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "engine/data/synthetic.h"
#include "engine/train/metrics.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::data;

namespace {

// 26 Criteo-like tables of a few thousand rows; every fifth has 3 ids per bag, one is weighted.
SyntheticSpec criteo_like(uint64_t seed) {
    SyntheticSpec spec;
    spec.seed = seed;
    for (int t = 0; t < 26; ++t) {
        SyntheticTable table;
        table.feature_name = "cat_" + std::to_string(t);
        table.num_embeddings = 1000 + 500 * (t % 7);
        table.pooling_factor = t % 5 == 0 ? 3.0 : 1.0;
        table.weighted = t == 3;
        spec.tables.push_back(table);
    }
    return spec;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() &&
           std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

bool same_batch(const Batch& a, const Batch& b) {
    return same_bytes(a.dense, b.dense) && same_bytes(a.labels, b.labels) &&
           a.sparse.keys() == b.sparse.keys() && same_bytes(a.sparse.values(), b.sparse.values()) &&
           same_bytes(a.sparse.lengths(), b.sparse.lengths()) &&
           a.sparse.has_weights() == b.sparse.has_weights() &&
           (!a.sparse.has_weights() || same_bytes(a.sparse.weights(), b.sparse.weights()));
}

// Sample b of a batch as plain vectors: dense row, label, and every key's bag (ids, weights).
struct Sample {
    std::vector<float> dense;
    float label;
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<float>> weights;

    bool operator==(const Sample& o) const {
        return dense == o.dense && label == o.label && ids == o.ids && weights == o.weights;
    }
};

std::vector<Sample> samples(const Batch& batch) {
    const int64_t count = batch.batch_size();
    const int64_t num_dense = batch.dense.size(1);
    std::vector<Sample> out(static_cast<size_t>(count));
    const float* dense = batch.dense.data<float>();
    for (int64_t b = 0; b < count; ++b) {
        out[b].dense.assign(dense + b * num_dense, dense + (b + 1) * num_dense);
        out[b].label = batch.labels.data<float>()[b];
    }
    for (const auto& [key, jt] : batch.sparse.to_dict()) {
        const auto ids = jt.to_dense();
        const auto weights = jt.to_dense_weights();
        for (int64_t b = 0; b < count; ++b) {
            out[b].ids.push_back(ids[b]);
            out[b].weights.push_back(weights[b]);
        }
    }
    return out;
}

}  // namespace

TEST_CASE("SyntheticDataset: same indices give bitwise the same batch", "[data]") {
    const SyntheticDataset a(criteo_like(test::test_seed()));
    const SyntheticDataset b(criteo_like(test::test_seed()));
    CHECK(same_batch(a.batch(1000, 64, Split::kTrain), b.batch(1000, 64, Split::kTrain)));
    CHECK(same_batch(a.batch(0, 64, Split::kEval), a.batch(0, 64, Split::kEval)));
    const SyntheticDataset other(criteo_like(test::test_seed() + 1));
    CHECK_FALSE(same_batch(a.batch(0, 64, Split::kTrain), other.batch(0, 64, Split::kTrain)));
}

TEST_CASE("SyntheticDataset: a batch is the concatenation of its rank slices", "[data]") {
    const SyntheticDataset ds(criteo_like(test::test_seed()));
    std::vector<float> whole_logits, part_logits;
    const auto whole = samples(ds.batch(40, 8, Split::kTrain, &whole_logits));
    auto first = samples(ds.batch(40, 4, Split::kTrain, &part_logits));
    std::vector<float> logits = part_logits;
    const auto second = samples(ds.batch(44, 4, Split::kTrain, &part_logits));
    logits.insert(logits.end(), part_logits.begin(), part_logits.end());
    first.insert(first.end(), second.begin(), second.end());
    CHECK(first == whole);
    CHECK(logits == whole_logits);
    // world_size 4, local batch 3: rank r holds global samples [step*12 + 3r, step*12 + 3r + 3).
    const auto global = samples(ds.batch(2 * 12, 12, Split::kTrain));
    for (int64_t rank = 0; rank < 4; ++rank) {
        const auto local = samples(ds.batch(2 * 12 + rank * 3, 3, Split::kTrain));
        CHECK(std::equal(local.begin(), local.end(), global.begin() + rank * 3));
    }
}

TEST_CASE("SyntheticDataset: the eval split is a different stream with the same teacher",
          "[data]") {
    const SyntheticDataset ds(criteo_like(test::test_seed()));
    const auto train = samples(ds.batch(0, 32, Split::kTrain));
    const auto eval = samples(ds.batch(0, 32, Split::kEval));
    int64_t equal_dense = 0;
    for (size_t b = 0; b < train.size(); ++b) {
        equal_dense += train[b].dense == eval[b].dense ? 1 : 0;
    }
    CHECK(equal_dense == 0);
}

TEST_CASE("SyntheticDataset: lengths, ids, weights and dense values are in range", "[data]") {
    SyntheticSpec spec = criteo_like(test::test_seed());
    spec.tables[1].pooling_factor = 0.5;  // mostly empty bags
    spec.tables[2].fixed_pooling = true;
    spec.tables[2].pooling_factor = 4;
    spec.tables[4].pooling_factor = 100;  // the normal approximation of the Poisson
    spec.tables[6].num_embeddings = 1;
    const SyntheticDataset ds(spec);
    const int64_t count = 2000;
    const Batch batch = ds.batch(0, count, Split::kTrain);
    REQUIRE(batch.batch_size() == count);
    REQUIRE(batch.sparse.keys() == ds.feature_names());
    CHECK(batch.sparse.stride() == count);
    REQUIRE(batch.sparse.has_weights());
    const auto dict = batch.sparse.to_dict();
    for (size_t t = 0; t < dict.size(); ++t) {
        const JaggedTensor& jt = dict[t].second;
        const int64_t* ids = jt.values().data<int64_t>();
        const float* w = jt.weights().data<float>();
        const auto [lo, hi] = std::minmax_element(ids, ids + jt.num_values());
        INFO("table " << t);
        CHECK(*lo >= 0);
        CHECK(*hi < spec.tables[t].num_embeddings);
        int64_t bad_weights = 0;
        for (int64_t i = 0; i < jt.num_values(); ++i) {
            const bool ok = spec.tables[t].weighted ? (w[i] > 0.0f && w[i] <= 1.0f) : w[i] == 1.0f;
            bad_weights += ok ? 0 : 1;
        }
        CHECK(bad_weights == 0);
        // Mean bag size: Poisson(pf) has standard error sqrt(pf / count).
        const double pf = spec.tables[t].pooling_factor;
        const double mean = static_cast<double>(jt.num_values()) / count;
        CHECK(std::abs(mean - pf) <= 5 * std::sqrt(std::max(pf, 0.1) / count));
    }
    const auto lengths2 = dict[2].second.lengths().to_vector<int64_t>();
    CHECK(std::all_of(lengths2.begin(), lengths2.end(), [](int64_t l) { return l == 4; }));
    const auto lengths1 = dict[1].second.lengths().to_vector<int64_t>();
    const auto empty = std::count(lengths1.begin(), lengths1.end(), 0);
    CHECK(std::abs(static_cast<double>(empty) / count - std::exp(-0.5)) < 0.05);
    const auto dense = batch.dense.to_vector<float>();
    CHECK(batch.dense.shape() == Shape{count, 13});
    CHECK(std::all_of(dense.begin(), dense.end(),
                      [](float v) { return std::isfinite(v) && v >= 0.0f && v < 40.0f; }));
}

TEST_CASE("SyntheticDataset: ids are Zipf-like and the hot ids are scattered over the rows",
          "[data]") {
    SyntheticSpec spec;
    spec.seed = test::test_seed();
    spec.tables = {{"zipf", 10000, 1.0}, {"uniform", 100, 1.0, false, 0.0}};
    const SyntheticDataset ds(spec);
    const int64_t count = 20000;
    const auto dict = ds.batch(0, count, Split::kTrain).sparse.to_dict();
    std::map<int64_t, int64_t> freq;
    for (int64_t id : dict[0].second.values().to_vector<int64_t>()) {
        ++freq[id];
    }
    std::vector<std::pair<int64_t, int64_t>> by_count;
    for (const auto& [id, n] : freq) {
        by_count.emplace_back(n, id);
    }
    std::sort(by_count.rbegin(), by_count.rend());
    // Continuous Zipf(1.05) over 10^4 ranks: the top rank holds 9.2% of the mass, the top 10
    // hold 30.6%.
    const double total = static_cast<double>(dict[0].second.num_values());
    CHECK(by_count[0].first / total > 0.05);
    CHECK(by_count[0].first / total < 0.15);
    int64_t top10 = 0;
    int64_t top10_in_first_rows = 0;
    for (size_t i = 0; i < 10; ++i) {
        top10 += by_count[i].first;
        top10_in_first_rows += by_count[i].second < 1000 ? 1 : 0;
    }
    CHECK(top10 / total > 0.25);
    CHECK(top10 / total < 0.45);
    CHECK(top10_in_first_rows < 6);  // not clustered at the low rows (expect ~1 of 10)
    // alpha = 0 is uniform over 100 rows: every row shows up, none more than twice its share.
    std::vector<int64_t> uniform(100, 0);
    for (int64_t id : dict[1].second.values().to_vector<int64_t>()) {
        ++uniform[id];
    }
    const auto [lo, hi] = std::minmax_element(uniform.begin(), uniform.end());
    CHECK(*lo > 0);
    CHECK(*hi < 2 * count / 100);
}

TEST_CASE("SyntheticDataset: the teacher's AUC is 0.85-0.9 and the click rate is sane", "[data]") {
    const SyntheticDataset ds(criteo_like(test::test_seed()));
    std::vector<float> logits;
    const Batch batch = ds.batch(0, 20000, Split::kEval, &logits);
    const train::Metrics m =
        train::compute_metrics(logits.data(), batch.labels.data<float>(), batch.batch_size());
    INFO("teacher auc " << m.auc << " ne " << m.ne);
    CHECK(m.auc > 0.85);
    CHECK(m.auc < 0.90);
    const auto labels = batch.labels.to_vector<float>();
    double rate = 0;
    for (float y : labels) {
        rate += y;
    }
    rate /= static_cast<double>(labels.size());
    CHECK(rate > 0.2);
    CHECK(rate < 0.45);
    CHECK(
        std::all_of(labels.begin(), labels.end(), [](float y) { return y == 0.0f || y == 1.0f; }));
}

TEST_CASE("SyntheticDataset: spec validation names the table", "[data]") {
    using Catch::Contains;
    SyntheticSpec spec = criteo_like(1);
    spec.tables[5].num_embeddings = 0;
    CHECK_THROWS_WITH(SyntheticDataset(spec), Contains("feature 'cat_5' needs num_embeddings > 0"));
    spec = criteo_like(1);
    spec.tables[7].feature_name = "cat_1";
    CHECK_THROWS_WITH(SyntheticDataset(spec), Contains("feature 'cat_1' appears twice"));
    spec = criteo_like(1);
    spec.tables[2].pooling_factor = -1;
    CHECK_THROWS_WITH(SyntheticDataset(spec), Contains("'cat_2' has pooling_factor -1"));
    const SyntheticDataset ds(criteo_like(1));
    CHECK_THROWS_AS(ds.batch(-1, 4, Split::kTrain), Error);
    CHECK(ds.batch(5, 0, Split::kTrain).batch_size() == 0);
}

TEST_CASE(
    "SyntheticDataset: raw_id_drift draws raw ids from a growing vocabulary, the newest "
    "the most frequent",
    "[data]") {
    SyntheticSpec spec;
    spec.seed = 7;
    SyntheticTable table;
    table.feature_name = "raw";
    table.num_embeddings = 1000;
    table.raw_id_drift = 100;  // a new id every 100 samples
    spec.tables.push_back(table);
    const SyntheticDataset data(spec);
    // Ids beyond the table's rows, never negative; slices agree with the whole batch.
    const Batch whole = data.batch(0, 400, Split::kTrain);
    const int64_t* v = whole.sparse.values().data<int64_t>();
    int64_t beyond = 0;
    for (int64_t i = 0; i < whole.sparse.values().numel(); ++i) {
        CHECK(v[i] >= 0);
        beyond += v[i] >= 1000 ? 1 : 0;
    }
    CHECK(beyond > whole.sparse.values().numel() * 9 / 10);
    const Batch slice = data.batch(100, 100, Split::kTrain);
    const int64_t* off = whole.sparse.offsets().data<int64_t>();
    CHECK(std::vector<int64_t>(v + off[100], v + off[200]) ==
          slice.sparse.values().to_vector<int64_t>());
    // The most frequent id of a window of samples is a new one each 100 samples later; the hot id
    // of the earlier window is still seen, less often.
    const auto hottest = [&](int64_t start) {
        std::map<int64_t, int64_t> count;
        const Batch b = data.batch(start, 100, Split::kTrain);
        const int64_t* ids = b.sparse.values().data<int64_t>();
        for (int64_t i = 0; i < b.sparse.values().numel(); ++i)
            ++count[ids[i]];
        return std::max_element(count.begin(), count.end(),
                                [](const auto& x, const auto& y) { return x.second < y.second; })
            ->first;
    };
    CHECK(hottest(0) != hottest(100));
    CHECK(hottest(100) != hottest(200));
    // Without drift the ids stay rows.
    spec.tables[0].raw_id_drift = 0;
    const Batch rows = SyntheticDataset(spec).batch(0, 400, Split::kTrain);
    const int64_t* r = rows.sparse.values().data<int64_t>();
    for (int64_t i = 0; i < rows.sparse.values().numel(); ++i)
        CHECK((r[i] >= 0 && r[i] < 1000));
}

TEST_CASE(
    "SyntheticDataset: raw_id_mod gives a plain table the drifting raw ids mod its rows, with the "
    "labels of the raw ids",
    "[data]") {
    SyntheticSpec spec;
    spec.seed = 11;
    SyntheticTable table;
    table.feature_name = "raw";
    table.num_embeddings = 500;
    table.pooling_factor = 2;
    table.raw_id_drift = 10;
    spec.tables.push_back(table);
    const SyntheticDataset raw(spec);
    spec.tables[0].raw_id_mod = true;
    const SyntheticDataset mod(spec);
    std::vector<float> raw_teacher, mod_teacher;
    const Batch a = raw.batch(300, 200, Split::kTrain, &raw_teacher);
    const Batch b = mod.batch(300, 200, Split::kTrain, &mod_teacher);
    const std::vector<int64_t> ids = a.sparse.values().to_vector<int64_t>();
    const std::vector<int64_t> rows = b.sparse.values().to_vector<int64_t>();
    REQUIRE(ids.size() == rows.size());
    for (size_t i = 0; i < ids.size(); ++i)
        CHECK(rows[i] == ids[i] % 500);
    // The teacher follows the raw id, so hashing collisions cost the model, not the labels.
    CHECK(mod_teacher == raw_teacher);
    CHECK(b.labels.to_vector<float>() == a.labels.to_vector<float>());
    spec.tables[0].raw_id_drift = 0;
    CHECK_THROWS_WITH(SyntheticDataset(spec), Catch::Contains("raw_id_mod but no raw_id_drift"));
}

TEST_CASE("SyntheticDataset: raw_id_eval_offset moves the eval split's vocabulary", "[data]") {
    SyntheticSpec spec;
    spec.seed = 5;
    SyntheticTable table;
    table.feature_name = "raw";
    table.num_embeddings = 100;
    table.raw_id_drift = 2;
    spec.tables.push_back(table);
    const auto ids = [](const Batch& b) {
        const std::vector<int64_t> v = b.sparse.values().to_vector<int64_t>();
        return std::set<int64_t>(v.begin(), v.end());
    };
    const auto shared = [](const std::set<int64_t>& x, const std::set<int64_t>& y) {
        int64_t n = 0;
        for (int64_t id : x)
            n += y.count(id) ? 1 : 0;
        return static_cast<double>(n) / static_cast<double>(x.size());
    };
    const SyntheticDataset plain(spec);
    spec.raw_id_eval_offset = 100000;
    const SyntheticDataset moved(spec);
    const std::set<int64_t> start = ids(plain.batch(0, 1000, Split::kTrain));
    const std::set<int64_t> later = ids(plain.batch(100000, 1000, Split::kTrain));
    const std::set<int64_t> eval0 = ids(plain.batch(0, 1000, Split::kEval));
    const std::set<int64_t> eval1 = ids(moved.batch(0, 1000, Split::kEval));
    // Without the offset eval draws the first samples' vocabulary, with it the later one's.
    CHECK(shared(eval0, start) > 0.6);
    CHECK(shared(eval1, later) > 0.6);
    CHECK(shared(eval1, start) < 0.1);
    // The train split and the labels' stream do not move.
    CHECK(ids(moved.batch(0, 1000, Split::kTrain)) == start);
}

TEST_CASE("SyntheticDataset: raw_id_vocabulary sets the live raw ids whatever the rows", "[data]") {
    SyntheticSpec spec;
    spec.seed = 3;
    SyntheticTable table;
    table.feature_name = "raw";
    table.num_embeddings = 10;
    table.raw_id_drift = 1000000;  // no new id within the batch: the window is the vocabulary
    spec.tables.push_back(table);
    const auto distinct = [](const SyntheticSpec& s) {
        const std::vector<int64_t> v =
            SyntheticDataset(s).batch(0, 4000, Split::kTrain).sparse.values().to_vector<int64_t>();
        return std::set<int64_t>(v.begin(), v.end()).size();
    };
    CHECK(distinct(spec) <= 10);
    spec.tables[0].raw_id_vocabulary = 1000;
    CHECK(distinct(spec) > 100);
    CHECK(distinct(spec) <= 1000);
}
