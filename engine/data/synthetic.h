// A synthetic click dataset with a planted signal, for tests, benchmarks and demos without Criteo.
// Every sample is a pure function of (seed, split, global sample index): rank r of world_size can
// generate its slice of a global batch as batch(step * global_B + r * B, B, split) and the union
// over ranks is bitwise the same as one process generating batch(step * global_B, global_B).
// Ids are Zipf-like per table (hot ids scattered over the rows), bags are Poisson around the
// pooling factor, dense features look like Criteo's after log1p, and labels are Bernoulli of a
// hidden "teacher" logit built from the features (linear dense + per-id effects + pairwise).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/sparse/batch.h"

namespace shardrec::data {

struct SyntheticTable {
    std::string feature_name;
    int64_t num_embeddings = 0;   // ids are in [0, num_embeddings)
    double pooling_factor = 1.0;  // mean ids per bag (Poisson; empty bags are possible)
    bool fixed_pooling = false;   // every bag has exactly round(pooling_factor) ids
    double zipf_alpha = 1.05;     // P(rank k) ~ 1 / k^alpha; 0 is uniform
    bool weighted = false;        // per-id weights in (0, 1] (id_score_list feature)
    int64_t max_length = 0;       // > 0: longer bags are cut to it (position-weighted tables)
    // > 0: raw 64-bit ids (a managed-collision table's) from a vocabulary that gains one id
    // every raw_id_drift samples, the newest the most frequent (Zipf over num_embeddings ranks).
    int64_t raw_id_drift = 0;
    // With raw_id_drift: the ids are raw id mod num_embeddings (a plain table hashing raw ids, the
    // baseline of a managed one); the teacher's effects still follow the raw id.
    bool raw_id_mod = false;
    // With raw_id_drift: > 0 draws the Zipf ranks over this many entries, not num_embeddings.
    int64_t raw_id_vocabulary = 0;
};

struct SyntheticSpec {
    uint64_t seed = 0;
    int64_t num_dense = 13;
    std::vector<SyntheticTable> tables;
    // Multiplies the teacher's feature terms (each of about unit variance). The default puts the
    // teacher's own AUC (the Bayes optimum) near 0.875 for Criteo-like specs.
    double signal_scale = 2.2;
    double base_logit = -1.2;  // teacher bias: sets the click rate (about 1/3 by default)
    // Raw-id drift: eval sample i draws from the vocabulary of (train) sample i + this offset.
    int64_t raw_id_eval_offset = 0;

    void validate() const;  // throws on empty/duplicate names, E <= 0, negative factors
};

namespace detail {

// Bins of the tabulated Zipf inverse of each table (synthetic.cpp, draw_id).
constexpr size_t kZipfBins = 4096;

// Per-table constants of SyntheticDataset, precomputed once (formulas in synthetic.cpp).
struct SyntheticTablePlan {
    int64_t num_embeddings = 0;
    int64_t zipf_ranks = 0;  // num_embeddings, or SyntheticTable::raw_id_vocabulary
    double pooling_factor = 0;
    bool zipf_log = false;                // alpha == 1: rank = exp(u * span) - 1
    double zipf_inv_exponent = 0;         // 1 / (1 - alpha)
    double zipf_span = 0;                 // (E + 1)^(1 - alpha) - 1, or log(E + 1)
    std::vector<double> zipf_x;           // [kZipfBins + 1] the inverse CDF at u = k / kZipfBins
    std::vector<uint8_t> zipf_exact_bin;  // [kZipfBins] 1: not interpolated (see draw_id)
    uint64_t scramble_mul = 1;            // id = (mul * rank + add) mod E, gcd(mul, E) = 1
    uint64_t scramble_add = 0;
    int64_t fixed_length = -1;    // >= 0 when fixed_pooling
    int64_t max_length = 0;       // > 0: the longest bag
    double poisson_exp_neg = 1;   // exp(-pooling_factor)
    bool poisson_normal = false;  // large pooling factor: normal approximation
    double teacher_scale = 1;     // 1 / sqrt(max(pooling_factor, 1))
    bool weighted = false;
    uint64_t effect_key = 0;            // keys the teacher's per-id effects of this table
    double effect_mean[3] = {0, 0, 0};  // their mean over the id distribution (subtracted)
    int64_t raw_id_drift = 0;           // SyntheticTable::raw_id_drift
    bool raw_id_mod = false;            // SyntheticTable::raw_id_mod
    uint64_t raw_id_key = 0;            // keys the raw ids of the vocabulary entries
};

}  // namespace detail

// The train and eval splits are disjoint random streams, both unbounded (num_samples -1).
class SyntheticDataset : public Dataset {
public:
    explicit SyntheticDataset(SyntheticSpec spec);

    const SyntheticSpec& spec() const { return spec_; }

    std::vector<std::string> feature_names() const override;

    Batch batch(int64_t global_start, int64_t count, Split split) const override {
        return batch(global_start, count, split, nullptr);
    }

    int64_t num_samples(Split) const override { return -1; }

    // Samples [global_start, global_start + count) of `split`. The KJT has one key per table in
    // spec order, stride = count; it has weights iff some table is weighted (unweighted tables then
    // carry weight 1). If teacher_logits is given it receives the count teacher logits, so tests
    // and tools can measure the planted signal (e.g. the Bayes-optimal AUC).
    Batch batch(int64_t global_start,
                int64_t count,
                Split split,
                std::vector<float>* teacher_logits) const;

private:
    // Dense features, teacher logits and labels of `count` samples, given the pooled effects.
    void fill_dense_and_labels(const uint64_t* keys,
                               int64_t count,
                               const double* effect_sum,
                               const double* pair,
                               Batch& batch,
                               float* teacher_logits) const;

    SyntheticSpec spec_;
    std::vector<detail::SyntheticTablePlan> plans_;
    std::vector<double> dense_mu_;       // [num_dense] log-scale location
    std::vector<double> dense_sigma_;    // [num_dense] log-scale spread
    std::vector<double> dense_mean_;     // [num_dense] mean of the generated feature
    std::vector<double> dense_inv_std_;  // [num_dense] 1 / its standard deviation
    std::vector<double> dense_weight_;   // [num_dense] teacher weights, unit norm
    bool any_weighted_ = false;
};

}  // namespace shardrec::data
