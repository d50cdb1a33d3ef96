// Metrics: AUC, BCE, NE and accuracy against hand-computed values, and the exact AUC against a
// brute-force O(n^2) pair count on random data with many ties.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/rng.h"
#include "engine/train/metrics.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::train;

namespace {

// P(score_pos > score_neg) + 0.5 P(tie) over all (positive, negative) pairs, 0/1 labels.
double brute_force_auc(const std::vector<float>& scores, const std::vector<float>& labels) {
    double wins = 0;
    double pairs = 0;
    for (size_t i = 0; i < scores.size(); ++i) {
        if (labels[i] != 1.0f) {
            continue;
        }
        for (size_t j = 0; j < scores.size(); ++j) {
            if (labels[j] != 0.0f) {
                continue;
            }
            pairs += 1;
            wins += scores[i] > scores[j] ? 1.0 : (scores[i] == scores[j] ? 0.5 : 0.0);
        }
    }
    return wins / pairs;
}

}  // namespace

TEST_CASE("Metrics: AUC of hand-computed examples, ties count half", "[train]") {
    // The classic example: 3 of the 4 (positive, negative) pairs are ordered correctly.
    const std::vector<float> s1 = {0.1f, 0.4f, 0.35f, 0.8f};
    const std::vector<float> y1 = {0, 0, 1, 1};
    CHECK(auc(s1.data(), y1.data(), 4) == 0.75);
    // One tie between a positive and a negative (0.5) and one clean win (1): (1 + 0.5) / 2.
    const std::vector<float> s2 = {0.5f, 0.5f, 0.9f};
    const std::vector<float> y2 = {0, 1, 1};
    CHECK(auc(s2.data(), y2.data(), 3) == 0.75);
    // All tied: 0.5. Perfectly reversed: 0.
    const std::vector<float> s3 = {1, 1, 1, 1};
    const std::vector<float> y3 = {0, 1, 0, 1};
    CHECK(auc(s3.data(), y3.data(), 4) == 0.5);
    const std::vector<float> s4 = {3, 2, 1};
    const std::vector<float> y4 = {0, 0, 1};
    CHECK(auc(s4.data(), y4.data(), 3) == 0.0);
    // One class only has no AUC: 0.5 by convention. A NaN score gives NaN.
    CHECK(auc(s4.data(), std::vector<float>{1, 1, 1}.data(), 3) == 0.5);
    const std::vector<float> s5 = {0.1f, std::nanf(""), 0.3f};
    CHECK(std::isnan(auc(s5.data(), y4.data(), 3)));
}

TEST_CASE("Metrics: exact AUC equals the brute-force pair count on random data with ties",
          "[train]") {
    const uint64_t seed = test::test_seed();
    for (int64_t n : {2, 7, 64, 500, 1500}) {
        for (int levels : {3, 50, 1 << 20}) {  // few levels -> many ties
            rng::Rng gen(seed, static_cast<uint64_t>(n * 31 + levels));
            std::vector<float> scores(static_cast<size_t>(n));
            std::vector<float> labels(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) {
                scores[i] = static_cast<float>(gen.randint(0, levels)) - 0.5f * levels;
                labels[i] = gen.uniform() < 0.3 ? 1.0f : 0.0f;
            }
            labels[0] = 1.0f;  // both classes present
            labels[1] = 0.0f;
            const double ref = brute_force_auc(scores, labels);
            const double got = auc(scores.data(), labels.data(), n);
            INFO("seed=" << seed << " n=" << n << " levels=" << levels);
            // Both are ratios of the same integer counts (halves included): only the final
            // division rounds, so they agree to a few ulps.
            CHECK(std::abs(got - ref) <= 4 * 0x1.0p-52);
        }
    }
}

TEST_CASE("Metrics: loss, NE and accuracy of hand-computed examples", "[train]") {
    // Logit 0 everywhere: BCE = ln 2 per sample, base rate 1/2 so NE = 1; logit 0 counts as a
    // positive prediction (p >= 0.5), so exactly the positive is right.
    const std::vector<float> zero = {0, 0};
    const std::vector<float> y = {0, 1};
    const Metrics m = compute_metrics(zero.data(), y.data(), 2);
    CHECK(m.count == 2);
    CHECK(std::abs(m.loss - std::log(2.0)) <= 1e-15);
    CHECK(std::abs(m.ne - 1.0) <= 1e-15);
    CHECK(m.accuracy == 0.5);
    CHECK(m.auc == 0.5);
    // Logits (2, -1, 3) against labels (1, 1, 0): BCE = ln(1+e^-2) + ln(1+e^1) + ln(1+e^3).
    const std::vector<float> logits = {2, -1, 3};
    const std::vector<float> labels = {1, 1, 0};
    const Metrics m2 = compute_metrics(logits.data(), labels.data(), 3);
    const double loss =
        (std::log1p(std::exp(-2.0)) + std::log1p(std::exp(1.0)) + std::log1p(std::exp(3.0))) / 3.0;
    const double entropy = -(2.0 / 3 * std::log(2.0 / 3) + 1.0 / 3 * std::log(1.0 / 3));
    CHECK(std::abs(m2.loss - loss) <= 1e-15);
    CHECK(std::abs(m2.ne - loss / entropy) <= 1e-15);
    CHECK(std::abs(m2.accuracy - 1.0 / 3) <= 1e-15);
    CHECK(m2.auc == 0.0);  // the one negative (3) outranks both positives
}

TEST_CASE("Metrics: the base-rate predictor has NE 1 and BCE is stable at large logits",
          "[train]") {
    std::vector<float> labels(400, 0.0f);
    for (size_t i = 0; i < labels.size(); i += 4) {
        labels[i] = 1.0f;  // base rate 1/4
    }
    const std::vector<float> logits(labels.size(), static_cast<float>(std::log(0.25 / 0.75)));
    const Metrics m = compute_metrics(logits.data(), labels.data(), 400);
    CHECK(std::abs(m.ne - 1.0) <= 1e-7);  // the logit is rounded to f32
    CHECK(m.accuracy == 0.75);
    CHECK(bce_with_logits(100.0, 1.0) < 1e-40);
    CHECK(bce_with_logits(100.0, 1.0) > 0.0);
    CHECK(std::abs(bce_with_logits(-100.0, 1.0) - 100.0) <= 1e-12);
    CHECK(std::abs(bce_with_logits(100.0, 0.0) - 100.0) <= 1e-12);
}

TEST_CASE("MetricsAccumulator: chunks, tensors, reset and gathered pairs", "[train]") {
    rng::Rng gen(test::test_seed(), 7);
    std::vector<float> logits(300);
    std::vector<float> labels(300);
    for (size_t i = 0; i < logits.size(); ++i) {
        labels[i] = gen.uniform() < 0.4 ? 1.0f : 0.0f;
        logits[i] = static_cast<float>(gen.normal() + 1.5 * labels[i]);
    }
    const Metrics whole = compute_metrics(logits.data(), labels.data(), 300);
    MetricsAccumulator acc;
    acc.add(logits.data(), labels.data(), 100);
    acc.add(Tensor::from_vector(std::vector<float>(logits.begin() + 100, logits.end()), {200, 1}),
            Tensor::from_vector(std::vector<float>(labels.begin() + 100, labels.end())));
    CHECK(acc.count() == 300);
    CHECK(acc.logits() == logits);
    CHECK(acc.labels() == labels);
    const Metrics m = acc.compute();
    CHECK(m.auc == whole.auc);
    CHECK(m.loss == whole.loss);
    CHECK(m.ne == whole.ne);
    CHECK(m.accuracy == whole.accuracy);
    CHECK(m.auc > 0.75);  // the planted separation is visible
    // Two "ranks" each holding half: the gathered pairs give the global metrics.
    MetricsAccumulator rank0, rank1, gathered;
    rank0.add(logits.data(), labels.data(), 150);
    rank1.add(logits.data() + 150, labels.data() + 150, 150);
    for (const MetricsAccumulator* r : {&rank0, &rank1}) {
        gathered.add(r->logits().data(), r->labels().data(), r->count());
    }
    CHECK(gathered.compute().auc == whole.auc);
    acc.reset();
    CHECK(acc.count() == 0);
    CHECK(acc.compute().count == 0);
    CHECK_THROWS_AS(acc.add(Tensor::zeros({3, 2}, DType::kF32), Tensor::zeros({6}, DType::kF32)),
                    Error);
}

namespace {

// Every metric from its textbook definition in long double, sharing no code with metrics.cpp:
// p = 1 / (1 + e^-x), loss = -mean(y ln p + (1 - y) ln(1 - p)), NE = loss / H(mean y),
// accuracy over p >= 1/2, calibration = sum p / sum y, AUC by counting pairs.
Metrics reference_metrics(const std::vector<float>& logits, const std::vector<float>& labels) {
    const size_t n = logits.size();
    long double loss = 0, sum_p = 0, sum_y = 0, correct = 0;
    for (size_t i = 0; i < n; ++i) {
        const long double p = 1.0L / (1.0L + std::exp(-static_cast<long double>(logits[i])));
        loss -= labels[i] * std::log(p) + (1.0L - labels[i]) * std::log(1.0L - p);
        sum_p += p;
        sum_y += labels[i];
        correct += ((p >= 0.5L) == (labels[i] == 1.0f)) ? 1 : 0;
    }
    const long double base = sum_y / n;
    const long double entropy = -(base * std::log(base) + (1 - base) * std::log(1 - base));
    Metrics m;
    m.count = static_cast<int64_t>(n);
    m.loss = static_cast<double>(loss / n);
    m.ne = static_cast<double>(loss / n / entropy);
    m.accuracy = static_cast<double>(correct / n);
    m.calibration = static_cast<double>(sum_p / sum_y);
    m.auc = brute_force_auc(logits, labels);
    return m;
}

}  // namespace

TEST_CASE("Metrics: every metric equals its float64 definition on random data", "[train]") {
    const uint64_t seed = test::test_seed();
    for (int64_t n : {3, 50, 777}) {
        for (double rate : {0.05, 0.3, 0.8}) {
            rng::Rng gen(seed, static_cast<uint64_t>(n * 1000 + rate * 100));
            std::vector<float> logits(static_cast<size_t>(n));
            std::vector<float> labels(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) {
                labels[i] = gen.uniform() < rate ? 1.0f : 0.0f;
                // Moderate logits keep the naive log(1 - p) of the reference accurate.
                logits[i] = static_cast<float>(2.0 * gen.normal() + labels[i] - 0.5);
            }
            labels[0] = 1.0f;
            labels[1] = 0.0f;
            const Metrics want = reference_metrics(logits, labels);
            const Metrics got = compute_metrics(logits.data(), labels.data(), n);
            INFO("seed=" << seed << " n=" << n << " rate=" << rate);
            CHECK(got.count == want.count);
            CHECK(std::abs(got.loss - want.loss) <= 1e-12 * want.loss);
            CHECK(std::abs(got.ne - want.ne) <= 1e-12 * want.ne);
            CHECK(got.accuracy == want.accuracy);
            CHECK(std::abs(got.calibration - want.calibration) <= 1e-12 * want.calibration);
            CHECK(std::abs(got.auc - want.auc) <= 4 * 0x1.0p-52);
        }
    }
}

TEST_CASE("Metrics: calibration of hand-computed examples; none without positives", "[train]") {
    // sigmoid(0) = 1/2 for both samples: sum p = 1, one positive: calibration 1.
    const std::vector<float> zero = {0, 0};
    const std::vector<float> y = {0, 1};
    CHECK(compute_metrics(zero.data(), y.data(), 2).calibration == 1.0);
    // Logit ln 3 (p = 3/4) on four samples with one positive: 3 / 1.
    const std::vector<float> three(4, static_cast<float>(std::log(3.0)));
    const std::vector<float> one = {0, 0, 1, 0};
    CHECK(std::abs(compute_metrics(three.data(), one.data(), 4).calibration - 3.0) <= 1e-6);
    const std::vector<float> none = {0, 0};
    CHECK(std::isnan(compute_metrics(zero.data(), none.data(), 2).calibration));
}

TEST_CASE("Metrics: global_metrics without a process group is the local computation", "[train]") {
    MetricsAccumulator acc;
    const std::vector<float> logits = {0.3f, -1.0f, 2.0f};
    const std::vector<float> labels = {1, 0, 1};
    acc.add(logits.data(), labels.data(), 3);
    const Metrics m = global_metrics(acc, nullptr);
    CHECK(m.auc == acc.compute().auc);
    CHECK(m.loss == acc.compute().loss);
    CHECK(all_gather_pairs(acc, nullptr).logits() == logits);
}
