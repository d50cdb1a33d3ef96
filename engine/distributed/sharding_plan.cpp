// The manual plan of a config's sharding section, and the checks every plan passes.
#include "engine/distributed/sharding_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/config/yaml.h"
#include "engine/core/error.h"

namespace shardrec {

namespace {

std::vector<std::string> keys_of(const std::map<std::string, ParameterSharding>& tables) {
    std::vector<std::string> keys;
    keys.reserve(tables.size());
    for (const auto& entry : tables) {
        keys.push_back(entry.first);
    }
    return keys;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
    const std::string guess = closest_match(word, candidates);
    return guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess);
}

// Round-robin state of the default placements (see the header).
struct DefaultPlacement {
    int next_rank = 0;
    int next_node = 0;
};

std::vector<int> default_ranks(ShardingType type,
                               int64_t dim,
                               size_t num_widths,
                               const PlacementEnv& env,
                               DefaultPlacement& state) {
    const int w = env.world_size;
    switch (type) {
        case ShardingType::kTableWise:
            return {state.next_rank++ % w};
        case ShardingType::kColumnWise: {
            const int k = num_widths > 0 ? static_cast<int>(num_widths)
                                         : static_cast<int>(std::min<int64_t>(w, dim));
            std::vector<int> ranks;
            for (int j = 0; j < k; ++j) {
                ranks.push_back((state.next_rank + j) % w);
            }
            state.next_rank = (state.next_rank + k) % w;
            return ranks;
        }
        case ShardingType::kTableRowWise:
            return node_ranks(state.next_node++ % env.num_nodes(), env.local_size);
        case ShardingType::kRowWise:
        case ShardingType::kDataParallel:
            break;
    }
    return all_ranks(w);
}

std::vector<int> to_int(const std::vector<int64_t>& values) {
    std::vector<int> out;
    out.reserve(values.size());
    for (int64_t v : values) {
        out.push_back(static_cast<int>(std::min<int64_t>(v, std::numeric_limits<int>::max())));
    }
    return out;
}

}  // namespace

void set_cache_params(ParameterSharding& ps,
                      const ShardingConfig& sharding,
                      const std::string& table) {
    if (!is_cached_kernel(ps.compute_kernel))
        return;
    const ShardingConfig::Cache& c = sharding.cache_of(table);
    ps.cache_params = CacheParams{
        c.load_factor, *parse_cache_algorithm(c.algorithm),
        c.precision.empty() ? std::nullopt : std::optional(dtype_from_name(c.precision)),
        sharding.cache.prefetch_pipeline};
}

const ParameterSharding& ShardingPlan::at(const std::string& table) const {
    const auto it = tables.find(table);
    if (it == tables.end()) {
        throw Error(fmt::format("{}: table '{}' is not in the sharding plan{}", error_context(),
                                table, did_you_mean(table, keys_of(tables))));
    }
    return it->second;
}

bool ShardingPlan::operator==(const ShardingPlan& other) const {
    return env.world_size == other.env.world_size && env.local_size == other.env.local_size &&
           env.compute_device == other.env.compute_device && tables == other.tables;
}

ShardingPlan manual_plan(const ModelConfig& model,
                         const ShardingConfig& sharding,
                         const PlacementEnv& env) {
    env.check();
    std::map<std::string, size_t> entry_of;
    for (size_t i = 0; i < sharding.tables.size(); ++i) {
        entry_of.emplace(sharding.tables[i].name, i);
    }
    ShardingPlan plan;
    plan.env = env;
    DefaultPlacement state;
    std::vector<std::string> errors;
    for (const ModelConfig::Table& table : model.tables) {
        const auto it = entry_of.find(table.name);
        const ShardingConfig::Table* entry =
            it == entry_of.end() ? nullptr : &sharding.tables[it->second];
        const std::string type_name = entry ? entry->sharding_type : sharding.sharding_type;
        const auto type = parse_sharding_type(type_name);
        SR_CHECK(type, "table '{}': unresolved sharding type '{}'", table.name, type_name);
        const std::string kernel_name = entry ? entry->compute_kernel
                                        : *type == ShardingType::kDataParallel
                                            ? "dense"
                                            : sharding.compute_kernel;
        const auto kernel = parse_compute_kernel(kernel_name);
        SR_CHECK(kernel, "table '{}': unresolved compute kernel '{}'", table.name, kernel_name);
        const std::vector<int64_t> widths = entry ? entry->column_widths : std::vector<int64_t>{};
        const std::vector<int> ranks =
            entry && !entry->ranks.empty()
                ? expand_ranks(*type, to_int(entry->ranks), env)
                : default_ranks(*type, table.embedding_dim, widths.size(), env, state);
        const std::string problem = sharding_problem(*type, *kernel, table.num_embeddings,
                                                     table.embedding_dim, ranks, widths, env);
        if (!problem.empty()) {
            const std::string where = entry
                                          ? fmt::format("{}: sharding.tables[{}] ('{}')",
                                                        entry->location, it->second, table.name)
                                          : fmt::format("sharding.sharding_type {} for table '{}'",
                                                        type_name, table.name);
            errors.push_back(fmt::format("{}: {}", where, problem));
            continue;
        }
        ParameterSharding& ps = plan.tables[table.name];
        ps = make_parameter_sharding(*type, *kernel, table.num_embeddings, table.embedding_dim,
                                     ranks, widths, env);
        set_cache_params(ps, sharding, table.name);
    }
    if (!errors.empty()) {
        throw Error(
            fmt::format("{}: the sharding section does not fit {} rank{} ({} per node):\n  {}",
                        error_context(), env.world_size, env.world_size == 1 ? "" : "s",
                        env.local_size, fmt::join(errors, "\n  ")));
    }
    return plan;
}

void check_plan(const ShardingPlan& plan, const std::vector<ModelConfig::Table>& tables) {
    plan.env.check();
    std::vector<std::string> errors;
    std::vector<std::string> model_names;
    for (const ModelConfig::Table& table : tables) {
        model_names.push_back(table.name);
        const auto it = plan.tables.find(table.name);
        if (it == plan.tables.end()) {
            errors.push_back(fmt::format("table '{}' has no sharding", table.name));
            continue;
        }
        const std::string problem =
            layout_problem(it->second, table.num_embeddings, table.embedding_dim, plan.env);
        if (!problem.empty()) {
            errors.push_back(fmt::format("table '{}': {}", table.name, problem));
        }
    }
    for (const auto& [name, ps] : plan.tables) {
        if (std::find(model_names.begin(), model_names.end(), name) == model_names.end()) {
            errors.push_back(fmt::format("table '{}' is not in the model{}", name,
                                         did_you_mean(name, model_names)));
        }
    }
    if (!errors.empty()) {
        throw Error(fmt::format("{}: invalid sharding plan ({} error{}):\n  {}", error_context(),
                                errors.size(), errors.size() == 1 ? "" : "s",
                                fmt::join(errors, "\n  ")));
    }
}

int bucket_owner(const ParameterSharding& sharding, int64_t first_row, int64_t bucket) {
    std::vector<int> holders;
    for (const ShardMetadata& s : sharding.sharding_spec) {
        if (s.shard_offsets[1] == 0 && first_row >= s.shard_offsets[0] &&
            first_row < s.shard_offsets[0] + s.shard_sizes[0])
            holders.push_back(s.rank);
    }
    if (sharding.sharding_spec.empty())  // data_parallel: every rank holds every row
        holders = sharding.ranks;
    SR_CHECK(!holders.empty(), "managed collision: no shard of the plan holds row {}", first_row);
    return holders[static_cast<size_t>(bucket) % holders.size()];
}

std::vector<int> bucket_owners(const ParameterSharding* sharding, const ModelConfig::Table& table) {
    const int64_t k = std::max<int64_t>(table.managed_collision.total_num_buckets, 1);
    std::vector<int> owners(static_cast<size_t>(k), 0);
    for (int64_t b = 0; sharding != nullptr && b < k; ++b)
        owners[static_cast<size_t>(b)] = bucket_owner(*sharding, b * (table.num_embeddings / k), b);
    return owners;
}

}  // namespace shardrec
