// TorchRec's CacheStatistics, measured on a sample of the training data: per table, the distinct
// rows of a global batch and, for any number of cache slots, the share of them an ideal
// (frequency-ordered) cache holds. The planner's miss time and `shardrec plan`'s predicted hit
// rate use them where the data is not synthetic (the synthetic data's law is known:
// predicted_cache_use, planner_estimate.h); without them ids are taken as uniform over the rows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardrec {

class TableIdStatistics {
public:
    TableIdStatistics() = default;
    // The table's rows in each sampled global batch (any order, with repeats), one list a batch.
    explicit TableIdStatistics(const std::vector<std::vector<int64_t>>& batches);

    int64_t batches() const { return batches_; }

    double ids_per_batch() const { return ids_; }

    double distinct_per_batch() const { return distinct_; }

    // The share of a batch's distinct rows among the `slots` rows used most in the sample (ties
    // by row), a row seen in one batch only counting as a miss (its first touch): an ideal
    // cache's hit rate; LRU's is lower.
    double hit_rate(int64_t slots) const;

private:
    int64_t batches_ = 0;
    double ids_ = 0, distinct_ = 0;
    std::vector<int64_t> ranks_;  // each batch's distinct rows' popularity ranks, ascending
};

// By table name; the tables measured (cached, not managed-collision).
using CacheStatistics = std::map<std::string, TableIdStatistics>;

// A table's statistics, or null (no statistics, or the table not measured).
inline const TableIdStatistics* find_statistics(const CacheStatistics* stats,
                                                const std::string& table) {
    if (stats == nullptr)
        return nullptr;
    const auto it = stats->find(table);
    return it != stats->end() ? &it->second : nullptr;
}

}  // namespace shardrec
