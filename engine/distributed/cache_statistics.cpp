#include "engine/distributed/cache_statistics.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace shardrec {

TableIdStatistics::TableIdStatistics(const std::vector<std::vector<int64_t>>& batches)
    : batches_(static_cast<int64_t>(batches.size())) {
    std::unordered_map<int64_t, int64_t> uses, in_batches;
    std::vector<std::vector<int64_t>> distinct(batches.size());
    int64_t ids = 0;
    for (size_t b = 0; b < batches.size(); ++b) {
        for (const int64_t row : batches[b])
            ++uses[row];
        ids += static_cast<int64_t>(batches[b].size());
        distinct[b] = batches[b];
        std::sort(distinct[b].begin(), distinct[b].end());
        distinct[b].erase(std::unique(distinct[b].begin(), distinct[b].end()), distinct[b].end());
        for (const int64_t row : distinct[b])
            ++in_batches[row];
    }
    // Popularity: most uses first, ties by row (deterministic).
    std::vector<std::pair<int64_t, int64_t>> order(uses.begin(), uses.end());  // (row, uses)
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    std::unordered_map<int64_t, int64_t> rank;
    rank.reserve(order.size());
    for (size_t i = 0; i < order.size(); ++i)
        rank[order[i].first] = static_cast<int64_t>(i);
    // A row of one batch only is a first touch, a miss whatever the cache: ranked past them all.
    const int64_t never = std::numeric_limits<int64_t>::max();
    for (const std::vector<int64_t>& rows : distinct) {
        for (const int64_t row : rows)
            ranks_.push_back(in_batches.at(row) > 1 ? rank.at(row) : never);
    }
    std::sort(ranks_.begin(), ranks_.end());
    if (batches_ > 0) {
        ids_ = static_cast<double>(ids) / static_cast<double>(batches_);
        distinct_ = static_cast<double>(ranks_.size()) / static_cast<double>(batches_);
    }
}

double TableIdStatistics::hit_rate(int64_t slots) const {
    if (ranks_.empty())
        return 1.0;
    const auto held = std::lower_bound(ranks_.begin(), ranks_.end(), slots) - ranks_.begin();
    return static_cast<double>(held) / static_cast<double>(ranks_.size());
}

}  // namespace shardrec
