// Evaluation metrics of a click model from logits and 0/1 labels: exact ROC AUC (ties share the
// average rank, i.e. the trapezoid rule), mean BCE-with-logits loss, normalized entropy, accuracy
// at p = 0.5 and calibration (TorchRec CalibrationMetric: sum of predictions / sum of labels).
// MetricsAccumulator keeps every (logit, label) pair of an eval pass, so the AUC is exact and a
// distributed eval can all_gather the pairs and compute the global metrics.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/tensor.h"

namespace shardrec::train {

struct Metrics {
    double loss = 0;      // mean BCE with logits (natural log)
    double auc = 0.5;     // ROC AUC; 0.5 when a class is absent; NaN if any logit is NaN
    double ne = 0;        // loss / entropy of the base rate (lower is better, 1 = base rate)
    double accuracy = 0;  // fraction with (logit >= 0) == (label >= 0.5)
    // sum sigmoid(logit) / sum label: 1 when the mean prediction is the base rate; NaN without
    // positives (JSON null).
    double calibration = 0;
    int64_t count = 0;  // number of samples
};

// Exact ROC AUC of scores against labels. A label counts as positive with weight label and as
// negative with weight 1 - label (so 0/1 labels give the usual AUC). Tied scores count half, as
// the average-rank (Mann-Whitney) statistic does. O(n log n); deterministic.
double auc(const float* scores, const float* labels, int64_t n);

// Numerically stable BCE with logits, element-wise: max(x, 0) - x*y + log1p(exp(-|x|)).
double bce_with_logits(double logit, double label);

// Every metric of n samples. n == 0 gives count 0 and the defaults above.
Metrics compute_metrics(const float* logits, const float* labels, int64_t n);

class MetricsAccumulator {
public:
    void add(const float* logits, const float* labels, int64_t n);
    // logits [B] or [B, 1] f32 and labels [B] f32, on the host.
    void add(const Tensor& logits, const Tensor& labels);

    Metrics compute() const;
    void reset();

    int64_t count() const { return static_cast<int64_t>(logits_.size()); }

    // The stored pairs in the order added, for an all_gather across ranks; add() the gathered
    // arrays to a fresh accumulator to get the global metrics.
    const std::vector<float>& logits() const { return logits_; }

    const std::vector<float>& labels() const { return labels_; }

private:
    std::vector<float> logits_;
    std::vector<float> labels_;
};

// Every rank's pairs, concatenated in rank order, on every rank (two all_gather_v); `local`
// itself when pg is null. Collective.
MetricsAccumulator all_gather_pairs(const MetricsAccumulator& local, comm::ProcessGroup* pg);

// The metrics of every rank's pairs: bitwise the same on every rank and equal to
// compute_metrics over the concatenation, so ranks may act on them without agreeing first.
Metrics global_metrics(const MetricsAccumulator& local, comm::ProcessGroup* pg);

}  // namespace shardrec::train
