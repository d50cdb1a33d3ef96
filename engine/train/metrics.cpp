#include "engine/train/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace shardrec::train {

double auc(const float* scores, const float* labels, int64_t n) {
    std::vector<std::pair<float, float>> pairs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        // NaN breaks the sort's strict weak ordering, and a diverged model has no AUC anyway.
        if (std::isnan(scores[i])) {
            return std::numeric_limits<double>::quiet_NaN();
        }
        pairs[i] = {scores[i], labels[i]};
    }
    std::sort(pairs.begin(), pairs.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    // Sweep groups of equal score from the top: each negative in a group is outranked by every
    // positive seen before the group and ties with half of the group's positives.
    double positives = 0;
    double negatives = 0;
    double area = 0;
    for (size_t i = 0; i < pairs.size();) {
        double group_pos = 0;
        double group_neg = 0;
        size_t j = i;
        for (; j < pairs.size() && pairs[j].first == pairs[i].first; ++j) {
            group_pos += pairs[j].second;
            group_neg += 1.0 - pairs[j].second;
        }
        area += group_neg * (positives + 0.5 * group_pos);
        positives += group_pos;
        negatives += group_neg;
        i = j;
    }
    if (positives <= 0 || negatives <= 0) {
        return 0.5;
    }
    return area / (positives * negatives);
}

double bce_with_logits(double logit, double label) {
    return std::max(logit, 0.0) - logit * label + std::log1p(std::exp(-std::abs(logit)));
}

Metrics compute_metrics(const float* logits, const float* labels, int64_t n) {
    Metrics m;
    m.count = n;
    if (n == 0) {
        return m;
    }
    double loss_sum = 0;
    double label_sum = 0;
    double prediction_sum = 0;
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i) {
        loss_sum += bce_with_logits(logits[i], labels[i]);
        label_sum += labels[i];
        prediction_sum += 1.0 / (1.0 + std::exp(-static_cast<double>(logits[i])));
        correct += (logits[i] >= 0.0f) == (labels[i] >= 0.5f) ? 1 : 0;
    }
    const double count = static_cast<double>(n);
    m.loss = loss_sum / count;
    m.accuracy = static_cast<double>(correct) / count;
    m.calibration =
        label_sum > 0 ? prediction_sum / label_sum : std::numeric_limits<double>::quiet_NaN();
    // TorchRec's NE clamps the base rate away from 0 and 1 so a one-class pass stays finite.
    const double p = std::clamp(label_sum / count, 1e-12, 1.0 - 1e-12);
    const double entropy = -(p * std::log(p) + (1.0 - p) * std::log(1.0 - p));
    m.ne = m.loss / entropy;
    m.auc = auc(logits, labels, n);
    return m;
}

void MetricsAccumulator::add(const float* logits, const float* labels, int64_t n) {
    SR_CHECK(n >= 0, "MetricsAccumulator::add: negative count {}", n);
    logits_.insert(logits_.end(), logits, logits + n);
    labels_.insert(labels_.end(), labels, labels + n);
}

void MetricsAccumulator::add(const Tensor& logits, const Tensor& labels) {
    SR_CHECK(logits.device().is_cpu() && labels.device().is_cpu(),
             "MetricsAccumulator::add: needs host tensors, got {} and {}", logits.str(),
             labels.str());
    SR_CHECK(logits.numel() == labels.numel() && labels.dim() == 1 &&
                 (logits.dim() == 1 || (logits.dim() == 2 && logits.size(1) == 1)),
             "MetricsAccumulator::add: logits {} do not match labels {}", logits.str(),
             labels.str());
    add(logits.data<float>(), labels.data<float>(), labels.numel());
}

Metrics MetricsAccumulator::compute() const {
    return compute_metrics(logits_.data(), labels_.data(), count());
}

void MetricsAccumulator::reset() {
    logits_.clear();
    labels_.clear();
}

MetricsAccumulator all_gather_pairs(const MetricsAccumulator& local, comm::ProcessGroup* pg) {
    if (pg == nullptr) {
        return local;
    }
    const int world = pg->size();
    Tensor count = Tensor::from_vector<int64_t>({local.count()});
    std::vector<int64_t> counts(static_cast<size_t>(world));
    Tensor all_counts = Tensor::from_blob(counts.data(), {world}, DType::kI64);
    pg->all_gather_v(count, all_counts, std::vector<int64_t>(static_cast<size_t>(world), 1)).wait();
    int64_t total = 0;
    for (int64_t c : counts) {
        total += c;
    }
    Tensor logits = Tensor::empty({total}, DType::kF32);
    Tensor labels = Tensor::empty({total}, DType::kF32);
    const Tensor my_logits = Tensor::from_vector(local.logits());
    const Tensor my_labels = Tensor::from_vector(local.labels());
    comm::Work a = pg->all_gather_v(my_logits, logits, counts);
    comm::Work b = pg->all_gather_v(my_labels, labels, counts);
    a.wait();
    b.wait();
    MetricsAccumulator all;
    all.add(logits.data<float>(), labels.data<float>(), total);
    return all;
}

Metrics global_metrics(const MetricsAccumulator& local, comm::ProcessGroup* pg) {
    return pg == nullptr ? local.compute() : all_gather_pairs(local, pg).compute();
}

}  // namespace shardrec::train
