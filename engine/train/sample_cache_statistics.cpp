#include "engine/train/sample_cache_statistics.h"

#include <algorithm>
#include <memory>

#include "engine/data/make_dataset.h"

namespace shardrec::train {

CacheStatistics sample_cache_statistics(const Config& config,
                                        int ranks,
                                        const data::Dataset* given) {
    CacheStatistics out;
    const int64_t wanted = config.sharding.cache.sample_batches;
    if (config.data.type == "synthetic" || wanted <= 0)
        return out;
    std::vector<const ModelConfig::Table*> cached;
    for (const ModelConfig::Table& t : config.model.tables) {
        const std::string kernel = config.sharding.kernel_of(t.name);
        if ((kernel == "key_value" || kernel == "fused_uvm_caching") &&
            t.managed_collision.zch_size == 0)
            cached.push_back(&t);
    }
    if (cached.empty())
        return out;
    std::unique_ptr<data::Dataset> opened;
    if (given == nullptr)
        opened = data::make_dataset(config);
    const data::Dataset& dataset = given != nullptr ? *given : *opened;
    const int64_t global = config.data.batch_size * std::max(ranks, 1);
    const int64_t rows = dataset.num_samples(data::Split::kTrain);
    const int64_t batches = rows < 0 ? wanted : std::min(wanted, rows / global);
    // [table][batch]: the table's rows in the batch, every feature of it.
    std::vector<std::vector<std::vector<int64_t>>> ids(cached.size());
    for (auto& per_table : ids)
        per_table.resize(static_cast<size_t>(batches));
    for (int64_t b = 0; b < batches; ++b) {
        const Batch batch = dataset.batch(b * global, global, data::Split::kTrain);
        const KeyedJaggedTensor& kjt = batch.sparse;
        const int64_t* values = kjt.values().data<int64_t>();
        for (size_t i = 0; i < cached.size(); ++i) {
            std::vector<int64_t>& into = ids[i][static_cast<size_t>(b)];
            for (const std::string& feature : cached[i]->feature_names) {
                const auto k = static_cast<size_t>(kjt.key_index(feature));
                into.insert(into.end(), values + kjt.offset_per_key()[k],
                            values + kjt.offset_per_key()[k + 1]);
            }
        }
    }
    for (size_t i = 0; i < cached.size(); ++i) {
        if (batches > 0)
            out.emplace(cached[i]->name, TableIdStatistics(ids[i]));
    }
    return out;
}

}  // namespace shardrec::train
