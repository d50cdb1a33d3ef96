// The planner's CacheStatistics (engine/distributed/cache_statistics.h) measured on the training
// data: the ids of each cached table in the first sharding.cache.sample_batches global batches.
#pragma once

#include "engine/config/config.h"
#include "engine/data/dataset.h"
#include "engine/distributed/cache_statistics.h"

namespace shardrec::train {

// The tables with a cache (compute_kernel key_value or fused_uvm_caching) whose ids are rows (not
// managed-collision), over global batches of data.batch_size x `ranks` samples of the train
// split of `dataset` (null: the config's data, opened only when there is something to measure).
// Empty for synthetic data (the planner knows its law), with sample_batches 0, or without such
// tables. Reads the same samples on every rank, so every rank plans alike.
CacheStatistics sample_cache_statistics(const Config& config,
                                        int ranks,
                                        const data::Dataset* dataset = nullptr);

}  // namespace shardrec::train
