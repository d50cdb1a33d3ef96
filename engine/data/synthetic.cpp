#include "engine/data/synthetic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "engine/core/rng.h"

namespace shardrec::data {

namespace {

// Random-stream tags: every draw is hash(sample_key, tag, ...), so adding a draw never shifts
// another one.
constexpr uint64_t kStreamTrain = 0x747261696e;  // "train"
constexpr uint64_t kStreamEval = 0x6576616c;     // "eval"
constexpr uint64_t kTagTable = 1;                // per (sample, table): bag length, ids, weights
constexpr uint64_t kTagDense = 2;                // per sample: dense features
constexpr uint64_t kTagLabel = 3;                // per sample: the label draw
constexpr uint64_t kTagEffect = 4;               // per table: keys the teacher's per-id effects
constexpr uint64_t kTagSetup = 32;               // per-table and per-dense constants

// Teacher weights of the three feature terms; each term has roughly unit variance, so the
// teacher logit's spread is about signal_scale.
constexpr double kDenseTermWeight = 0.6;
constexpr double kSparseTermWeight = 0.7;
constexpr double kPairTermWeight = 0.4;

// Poisson inversion is exact but its loop runs ~pooling_factor times; above this a rounded normal
// approximation is as good and constant time.
constexpr double kPoissonNormalAbove = 64.0;

// A cheap approximately standard normal from one hash: Irwin-Hall sum of four 16-bit uniforms
// (variance 4/12), rescaled. Bounded by +-3.46, which is harmless for planted effects.
inline double fast_normal(uint64_t bits) {
    const double s = static_cast<double>((bits & 0xffff) + ((bits >> 16) & 0xffff) +
                                         ((bits >> 32) & 0xffff) + (bits >> 48));
    return (s * (1.0 / 65536.0) - 2.0) * 1.7320508075688772;
}

inline double sigmoid(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

// Draw i of the splitmix64 sequence keyed by `key`, one mix per number. The keys themselves come
// from the full rng::hash once per (sample, table) or (table, id), which keeps per-id work small.
inline uint64_t draw(uint64_t key, uint64_t i) {
    return rng::mix64(key + i * 0x9e3779b97f4a7c15ull);
}

// ---- per-id draws ----

using detail::kZipfBins;
using detail::SyntheticTablePlan;

int64_t poisson_length(const SyntheticTablePlan& p, uint64_t bits) {
    if (p.fixed_length >= 0) {
        return p.fixed_length;
    }
    const double pf = p.pooling_factor;
    if (p.poisson_normal) {
        return std::max<int64_t>(0, std::llround(pf + std::sqrt(pf) * fast_normal(bits)));
    }
    // Poisson by inversion; the cap only guards against u rounding above the summed CDF.
    const double u = rng::uniform01(bits);
    double prob = p.poisson_exp_neg;
    double cdf = prob;
    int64_t k = 0;
    const auto cap = static_cast<int64_t>(10 * pf) + 100;
    while (u > cdf && k < cap) {
        ++k;
        prob *= pf / static_cast<double>(k);
        cdf += prob;
    }
    return k;
}

int64_t bag_length(const SyntheticTablePlan& p, uint64_t bits) {
    const int64_t n = poisson_length(p, bits);
    return p.max_length > 0 ? std::min(n, p.max_length) : n;
}

// The continuous Zipf inverse CDF (see make_plan): x(u) with rank = floor(x) - 1.
double zipf_inverse(const SyntheticTablePlan& p, double u) {
    return p.zipf_log ? std::exp(u * p.zipf_span)
                      : std::pow(1.0 + u * p.zipf_span, p.zipf_inv_exponent);
}

// Zipf rank by the inverse of the continuous CDF, then scattered over the rows. The inverse is
// interpolated between its values at kZipfBins + 1 points, within 1e-5 of the value, and
// evaluated in the bins where interpolation would be further off (tabulate_zipf): a pow per id
// was most of the generator's time.
int64_t draw_rank(const SyntheticTablePlan& p, uint64_t bits) {
    const double u = rng::uniform01(bits);
    const double t = u * kZipfBins;
    const auto k = static_cast<size_t>(t);
    const double x = p.zipf_exact_bin[k] ? zipf_inverse(p, u)
                                         : p.zipf_x[k] + (t - static_cast<double>(k)) *
                                                             (p.zipf_x[k + 1] - p.zipf_x[k]);
    return std::clamp<int64_t>(static_cast<int64_t>(x) - 1, 0, p.zipf_ranks - 1);
}

int64_t draw_id(const SyntheticTablePlan& p, uint64_t bits) {
    const auto rows = static_cast<uint64_t>(p.num_embeddings);
    const auto rank = static_cast<uint64_t>(draw_rank(p, bits));
    if (rows <= (uint64_t{1} << 32)) {
        return static_cast<int64_t>((p.scramble_mul * rank + p.scramble_add) % rows);
    }
    const unsigned __int128 y =
        static_cast<unsigned __int128>(p.scramble_mul) * rank + p.scramble_add;
    return static_cast<int64_t>(y % rows);
}

// A raw 64-bit id (a managed-collision table's) from a vocabulary that grows by one id per
// epoch: Zipf rank r of epoch e is vocabulary entry e - r, so the newest id is the most frequent
// and each id cools down as newer ones come.
int64_t draw_raw_id(const SyntheticTablePlan& p, uint64_t bits, int64_t epoch) {
    const auto entry = static_cast<uint64_t>(epoch - draw_rank(p, bits));
    return static_cast<int64_t>(rng::mix64(p.raw_id_key ^ entry) >> 1);
}

// Tabulates the Zipf inverse for draw_id: its value at every bin edge, and the bins where
// linear interpolation is off by more than kZipfInterpolationError (relative, checked at
// three points inside the bin), where draw_id evaluates it instead (steep ends: alpha far from 1).
void tabulate_zipf(SyntheticTablePlan& p) {
    constexpr double kZipfInterpolationError = 1e-5;
    p.zipf_x.resize(kZipfBins + 1);
    for (size_t k = 0; k <= kZipfBins; ++k) {
        p.zipf_x[k] = zipf_inverse(p, static_cast<double>(k) / kZipfBins);
    }
    p.zipf_exact_bin.assign(kZipfBins, 0);
    for (size_t k = 0; k < kZipfBins; ++k) {
        for (const double f : {0.25, 0.5, 0.75}) {
            const double exact = zipf_inverse(p, (static_cast<double>(k) + f) / kZipfBins);
            const double interpolated = p.zipf_x[k] + f * (p.zipf_x[k + 1] - p.zipf_x[k]);
            if (!(std::abs(interpolated - exact) <= kZipfInterpolationError * exact)) {
                p.zipf_exact_bin[k] = 1;
            }
        }
    }
}

// Monte-Carlo draws per table for the mean teacher effect (see make_plan).
constexpr int64_t kEffectMeanDraws = 8192;

// The three raw teacher effects of row `id` (0: main, 1 and 2: the two sides of the pair term).
// They depend on (seed, table, id) only, so train and eval share one teacher.
inline void raw_effects(const SyntheticTablePlan& p, int64_t id, double out[3]) {
    const uint64_t key = rng::mix64(p.effect_key ^ static_cast<uint64_t>(id));
    for (uint64_t m = 0; m < 3; ++m) {
        out[m] = fast_normal(draw(key, m));
    }
}

SyntheticTablePlan make_plan(const SyntheticTable& table, uint64_t seed, uint64_t t) {
    SyntheticTablePlan p;
    const auto rows = static_cast<uint64_t>(table.num_embeddings);
    p.num_embeddings = table.num_embeddings;
    p.zipf_ranks = table.raw_id_drift > 0 && table.raw_id_vocabulary > 0 ? table.raw_id_vocabulary
                                                                         : table.num_embeddings;
    p.pooling_factor = table.pooling_factor;
    p.weighted = table.weighted;
    // Continuous Zipf on [1, E+1): CDF(x) ~ (x^(1-a) - 1) / ((E+1)^(1-a) - 1), inverted.
    const double one_minus_alpha = 1.0 - table.zipf_alpha;
    p.zipf_log = std::abs(one_minus_alpha) < 1e-9;
    const double rows_plus_one = static_cast<double>(p.zipf_ranks) + 1.0;
    p.zipf_span =
        p.zipf_log ? std::log(rows_plus_one) : std::pow(rows_plus_one, one_minus_alpha) - 1.0;
    p.zipf_inv_exponent = p.zipf_log ? 0.0 : 1.0 / one_minus_alpha;
    tabulate_zipf(p);
    // A bijective affine map scatters the hot ranks over the rows (and so over row shards).
    uint64_t mul = (rng::hash(seed, kTagSetup, t, 0) % rows) | 1;
    while (std::gcd(mul, rows) != 1) {
        mul = mul + 2 < rows ? mul + 2 : 1;
    }
    p.scramble_mul = mul;
    p.scramble_add = rng::hash(seed, kTagSetup, t, 1) % rows;
    const double pf = table.pooling_factor;
    p.fixed_length = table.fixed_pooling ? std::llround(pf) : -1;
    p.max_length = table.max_length;
    p.poisson_exp_neg = std::exp(-pf);
    p.poisson_normal = pf > kPoissonNormalAbove;
    p.teacher_scale = 1.0 / std::sqrt(std::max(pf, 1.0));
    p.effect_key = rng::hash(seed, kTagEffect, t);
    p.raw_id_drift = table.raw_id_drift;
    p.raw_id_mod = table.raw_id_mod;
    p.raw_id_key = rng::hash(seed, kTagSetup + 4, t);
    // Under Zipf a few hot rows dominate the mean effect, which would move the click rate from
    // seed to seed; centring on a Monte-Carlo mean over the id distribution keeps it steady.
    double sum[3] = {0, 0, 0};
    for (int64_t i = 0; i < kEffectMeanDraws; ++i) {
        double e[3];
        raw_effects(p, draw_id(p, rng::hash(seed, kTagSetup + 3, t, static_cast<uint64_t>(i))), e);
        for (int m = 0; m < 3; ++m) {
            sum[m] += e[m];
        }
    }
    for (int m = 0; m < 3; ++m) {
        p.effect_mean[m] = sum[m] / kEffectMeanDraws;
    }
    return p;
}

// Two independent standard normals from two uniforms (Box-Muller, both outputs): the log-normal
// tails of count features need real normals, not fast_normal.
inline void normal_pair(uint64_t bits_a, uint64_t bits_b, double z[2]) {
    const double r = std::sqrt(-2.0 * std::log(1.0 - rng::uniform01(bits_a)));
    const double theta = 6.283185307179586 * rng::uniform01(bits_b);
    double sin_theta = 0, cos_theta = 0;
    ::sincos(theta, &sin_theta, &cos_theta);  // glibc: one call for both
    z[0] = r * cos_theta;
    z[1] = r * sin_theta;
}

// log1p of the counts most dense features take, computed once (the same values as std::log1p).
constexpr int64_t kSmallCounts = 1024;

const std::array<float, kSmallCounts> kLog1pSmallCounts = [] {
    std::array<float, kSmallCounts> t{};
    for (int64_t c = 0; c < kSmallCounts; ++c) {
        t[static_cast<size_t>(c)] = static_cast<float>(std::log1p(static_cast<double>(c)));
    }
    return t;
}();

// A dense feature from a standard normal z: a log-normal count, floored like Criteo's integer
// features, then log1p.
inline float dense_value(double mu, double sigma, double z) {
    const double count = std::floor(std::exp(mu + sigma * z));
    return count < kSmallCounts ? kLog1pSmallCounts[static_cast<size_t>(count)]
                                : static_cast<float>(std::log1p(count));
}

struct TableOut {
    const uint64_t* keys;    // [B] this table's (sample, table) keys
    const int64_t* lengths;  // [B] this table's bag sizes
    int64_t* ids;            // this table's values
    float* weights;          // this table's weights, or nullptr
    int64_t first_sample;    // the vocabulary epoch of sample 0 is first_sample / raw_id_drift
    int64_t* raw_ids;        // [values] scratch for raw_id_mod tables: the raw ids, else nullptr
    double* effect_sum;      // [B] += pooled main effect
    double* pair_p;          // [B] pooled pair effect, left side
    double* pair_q;          // [B] pooled pair effect, right side
};

// Draws one table's bags for every sample and pools the teacher's per-id effects over each bag,
// weighted like a weighted sum-pooled embedding bag would be.
void fill_table(const SyntheticTablePlan& p, int64_t count, const TableOut& out) {
    // Ids and weights first, then the effects: two short loops with independent iterations
    // keep more of the hashing in flight than one long one.
    int64_t at = 0;
    for (int64_t b = 0; b < count; ++b) {
        const uint64_t key = out.keys[b];
        for (int64_t k = 0; k < out.lengths[b]; ++k, ++at) {
            const auto kk = static_cast<uint64_t>(k);
            out.ids[at] = p.raw_id_drift > 0 ? draw_raw_id(p, draw(key, 1 + 2 * kk),
                                                           (out.first_sample + b) / p.raw_id_drift)
                                             : draw_id(p, draw(key, 1 + 2 * kk));
            if (out.raw_ids) {
                out.raw_ids[at] = out.ids[at];
                out.ids[at] %= p.num_embeddings;
            }
            if (out.weights) {
                out.weights[at] =
                    p.weighted ? static_cast<float>(1.0 - rng::uniform01(draw(key, 2 + 2 * kk)))
                               : 1.0f;
            }
        }
    }
    at = 0;
    for (int64_t b = 0; b < count; ++b) {
        double main = 0, left = 0, right = 0;
        for (int64_t k = 0; k < out.lengths[b]; ++k, ++at) {
            const double w = out.weights ? out.weights[at] : 1.0;
            double e[3];
            raw_effects(p, out.raw_ids ? out.raw_ids[at] : out.ids[at], e);
            main += w * (e[0] - p.effect_mean[0]);
            left += w * (e[1] - p.effect_mean[1]);
            right += w * (e[2] - p.effect_mean[2]);
        }
        out.effect_sum[b] += p.teacher_scale * main;
        out.pair_p[b] = p.teacher_scale * left;
        out.pair_q[b] = p.teacher_scale * right;
    }
}

}  // namespace

// ---- spec and setup ----

void SyntheticSpec::validate() const {
    SR_CHECK(num_dense >= 0, "synthetic: num_dense must be >= 0, got {}", num_dense);
    SR_CHECK(std::isfinite(signal_scale) && std::isfinite(base_logit),
             "synthetic: signal_scale and base_logit must be finite");
    std::unordered_set<std::string> names;
    for (size_t t = 0; t < tables.size(); ++t) {
        const SyntheticTable& table = tables[t];
        SR_CHECK(!table.feature_name.empty(), "synthetic: table {} has no feature_name", t);
        SR_CHECK(names.insert(table.feature_name).second, "synthetic: feature '{}' appears twice",
                 table.feature_name);
        SR_CHECK(table.num_embeddings > 0, "synthetic: feature '{}' needs num_embeddings > 0",
                 table.feature_name);
        SR_CHECK(table.raw_id_drift >= 0, "synthetic: feature '{}' has raw_id_drift {} (want >= 0)",
                 table.feature_name, table.raw_id_drift);
        SR_CHECK(table.raw_id_vocabulary >= 0,
                 "synthetic: feature '{}' has raw_id_vocabulary {} (want >= 0)", table.feature_name,
                 table.raw_id_vocabulary);
        SR_CHECK(!table.raw_id_mod || table.raw_id_drift > 0,
                 "synthetic: feature '{}' has raw_id_mod but no raw_id_drift", table.feature_name);
        SR_CHECK(table.pooling_factor >= 0 && table.pooling_factor < 1e6,
                 "synthetic: feature '{}' has pooling_factor {} (want [0, 1e6))",
                 table.feature_name, table.pooling_factor);
        SR_CHECK(table.zipf_alpha >= 0 && table.zipf_alpha <= 10,
                 "synthetic: feature '{}' has zipf_alpha {} (want [0, 10])", table.feature_name,
                 table.zipf_alpha);
    }
}

SyntheticDataset::SyntheticDataset(SyntheticSpec spec) : spec_(std::move(spec)) {
    spec_.validate();
    const uint64_t seed = spec_.seed;
    for (size_t t = 0; t < spec_.tables.size(); ++t) {
        any_weighted_ = any_weighted_ || spec_.tables[t].weighted;
        plans_.push_back(make_plan(spec_.tables[t], seed, t));
    }
    double norm = 0;
    for (int64_t j = 0; j < spec_.num_dense; ++j) {
        const auto jj = static_cast<uint64_t>(j);
        const double mu = 0.5 + 2.5 * rng::uniform(seed, kTagSetup + 1, jj, 0);
        const double sigma = 0.5 + 1.0 * rng::uniform(seed, kTagSetup + 1, jj, 1);
        dense_mu_.push_back(mu);
        dense_sigma_.push_back(sigma);
        // The teacher standardises each feature by its Monte-Carlo moments, so the dense term is
        // centred with unit variance whatever mu and sigma are.
        const uint64_t key = rng::hash(seed, kTagSetup + 4, jj);
        double sum = 0, sum_sq = 0;
        for (uint64_t i = 0; i < kEffectMeanDraws; ++i) {
            double z[2];
            normal_pair(draw(key, 2 * i), draw(key, 2 * i + 1), z);
            const double v = dense_value(mu, sigma, z[0]);
            sum += v;
            sum_sq += v * v;
        }
        const double mean = sum / kEffectMeanDraws;
        dense_mean_.push_back(mean);
        dense_inv_std_.push_back(
            1.0 / std::sqrt(std::max(sum_sq / kEffectMeanDraws - mean * mean, 1e-12)));
        dense_weight_.push_back(rng::normal(seed, kTagSetup + 2, jj));
        norm += dense_weight_.back() * dense_weight_.back();
    }
    for (double& w : dense_weight_) {
        w /= std::sqrt(std::max(norm, 1e-300));
    }
}

std::vector<std::string> SyntheticDataset::feature_names() const {
    std::vector<std::string> names;
    for (const auto& table : spec_.tables) {
        names.push_back(table.feature_name);
    }
    return names;
}

// ---- batch generation ----

Batch SyntheticDataset::batch(int64_t global_start,
                              int64_t count,
                              Split split,
                              std::vector<float>* teacher_logits) const {
    SR_CHECK(global_start >= 0 && count >= 0, "synthetic: bad sample range [{}, {} + {})",
             global_start, global_start, count);
    const auto num_tables = static_cast<int64_t>(plans_.size());
    const uint64_t stream = split == Split::kTrain ? kStreamTrain : kStreamEval;
    std::vector<uint64_t> keys(static_cast<size_t>(count));
    for (int64_t b = 0; b < count; ++b) {
        keys[b] = rng::hash(spec_.seed, stream, static_cast<uint64_t>(global_start + b));
    }
    // Pass 1: bag sizes, so values can be allocated once.
    Tensor lengths = Tensor::empty({num_tables * count}, DType::kI64);
    int64_t* len = lengths.data<int64_t>();
    std::vector<int64_t> table_start(static_cast<size_t>(num_tables) + 1, 0);
    std::vector<uint64_t> table_keys(static_cast<size_t>(num_tables * count));  // [T][B]
    for (int64_t t = 0; t < num_tables; ++t) {
        int64_t sum = 0;
        for (int64_t b = 0; b < count; ++b) {
            const uint64_t key = rng::hash(keys[b], kTagTable, static_cast<uint64_t>(t));
            table_keys[t * count + b] = key;
            len[t * count + b] = bag_length(plans_[t], draw(key, 0));
            sum += len[t * count + b];
        }
        table_start[t + 1] = table_start[t] + sum;
    }
    // Pass 2: ids and weights, table-major like the KJT, pooling the teacher's effects.
    Tensor values = Tensor::empty({table_start[num_tables]}, DType::kI64);
    std::optional<Tensor> weights;
    if (any_weighted_) {
        weights = Tensor::empty({table_start[num_tables]}, DType::kF32);
    }
    std::vector<double> effect_sum(static_cast<size_t>(count), 0.0);
    std::vector<double> pair(static_cast<size_t>(2 * num_tables * count), 0.0);  // [2][T][B]
    std::vector<int64_t> raw_ids;
    const int64_t first_sample =
        split == Split::kEval ? global_start + spec_.raw_id_eval_offset : global_start;
    for (int64_t t = 0; t < num_tables; ++t) {
        if (plans_[t].raw_id_mod)
            raw_ids.resize(static_cast<size_t>(table_start[t + 1] - table_start[t]));
        TableOut out{table_keys.data() + t * count,
                     len + t * count,
                     values.data<int64_t>() + table_start[t],
                     weights ? weights->data<float>() + table_start[t] : nullptr,
                     first_sample,
                     plans_[t].raw_id_mod ? raw_ids.data() : nullptr,
                     effect_sum.data(),
                     pair.data() + t * count,
                     pair.data() + (num_tables + t) * count};
        fill_table(plans_[t], count, out);
    }
    Batch batch;
    batch.dense = Tensor::empty({count, spec_.num_dense}, DType::kF32);
    batch.labels = Tensor::empty({count}, DType::kF32);
    if (teacher_logits) {
        teacher_logits->resize(static_cast<size_t>(count));
    }
    fill_dense_and_labels(keys.data(), count, effect_sum.data(), pair.data(), batch,
                          teacher_logits ? teacher_logits->data() : nullptr);
    batch.sparse = KeyedJaggedTensor::from_lengths_sync(
        feature_names(), std::move(values), std::move(lengths), std::move(weights), count);
    return batch;
}

// Dense features like Criteo's counts after log1p, then the teacher logit and the label.
void SyntheticDataset::fill_dense_and_labels(const uint64_t* keys,
                                             int64_t count,
                                             const double* effect_sum,
                                             const double* pair,
                                             Batch& batch,
                                             float* teacher_logits) const {
    const int64_t num_dense = spec_.num_dense;
    const auto num_tables = static_cast<int64_t>(plans_.size());
    const double per_table = num_tables > 0 ? 1.0 / std::sqrt(static_cast<double>(num_tables)) : 0;
    float* dense = batch.dense.data<float>();
    float* labels = batch.labels.data<float>();
    for (int64_t b = 0; b < count; ++b) {
        double linear = 0;
        const uint64_t dense_key = rng::hash(keys[b], kTagDense);
        double z[2];
        for (int64_t j = 0; j < num_dense; ++j) {
            if (j % 2 == 0) {  // features 2i and 2i + 1 share draws 2i and 2i + 1
                const auto jj = static_cast<uint64_t>(j);
                normal_pair(draw(dense_key, jj), draw(dense_key, jj + 1), z);
            }
            const float v = dense_value(dense_mu_[j], dense_sigma_[j], z[j % 2]);
            dense[b * num_dense + j] = v;  // dense[b, j]
            linear += dense_weight_[j] * (v - dense_mean_[j]) * dense_inv_std_[j];
        }
        double pairwise = 0;
        for (int64_t t = 0; t < num_tables; ++t) {
            const int64_t next = (t + 1) % num_tables;
            pairwise += pair[t * count + b] * pair[(num_tables + next) * count + b];
        }
        const double logit =
            spec_.base_logit + spec_.signal_scale * (kDenseTermWeight * linear +
                                                     kSparseTermWeight * per_table * effect_sum[b] +
                                                     kPairTermWeight * per_table * pairwise);
        labels[b] = rng::uniform(keys[b], kTagLabel) < sigmoid(logit) ? 1.0f : 0.0f;
        if (teacher_logits) {
            teacher_logits[b] = static_cast<float>(logit);
        }
    }
}

}  // namespace shardrec::data
