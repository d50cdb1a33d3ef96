// Plan files: written by plan_to_yaml, read strictly through the config reader, so every error
// names its path and file:line, and checked against the model and the world.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "engine/config/fields.h"
#include "engine/config/yaml.h"
#include "engine/core/error.h"
#include "engine/distributed/sharding_plan.h"

namespace shardrec {

namespace {

struct ShardEntry {
    std::vector<int64_t> shard_offsets;
    std::vector<int64_t> shard_sizes;
    std::string placement;

    void visit(FieldVisitor& v) {
        v.field(Field("shard_offsets", "[row, column] of the shard's first element")
                    .required()
                    .at_least(0),
                shard_offsets);
        v.field(Field("shard_sizes", "[rows, columns]").required().at_least(0), shard_sizes);
        v.field(Field("placement", "rank:R/device").required(), placement);
    }
};

struct TableEntry {
    std::string name;
    std::string sharding_type;
    std::string compute_kernel;
    std::vector<int64_t> ranks;
    std::vector<ShardEntry> shards;
    double load_factor = 0.2;
    std::string algorithm = "lru";
    std::string precision;
    bool prefetch_pipeline = false;

    void visit(FieldVisitor& v) {
        v.field(Field("name", "table").required(), name);
        v.field(Field("sharding_type", "").required().one_of(sharding_type_names()), sharding_type);
        v.field(Field("compute_kernel", "").required().one_of(compute_kernel_names()),
                compute_kernel);
        v.field(Field("ranks", "rank of each shard").required().at_least(0), ranks);
        v.section_list(Field("shards", "the sharding spec"), section_list_of(shards));
        const auto kernel = parse_compute_kernel(compute_kernel);
        v.section(Field("cache_params", "")
                      .only_if(kernel && is_cached_kernel(*kernel), "the kernel has a cache"),
                  [this](FieldVisitor& c) {
                      c.field(Field("load_factor", "").greater_than(0).at_most(1), load_factor);
                      c.field(Field("algorithm", "").one_of({"lru", "lfu"}), algorithm);
                      c.field(Field("precision", "").one_of({"", "f32", "f16", "bf16"}), precision);
                      c.field(Field("prefetch_pipeline", ""), prefetch_pipeline);
                  });
    }
};

struct PlanFile {
    int64_t world_size = 0;
    int64_t local_size = 0;
    std::string compute_device;
    std::vector<TableEntry> tables;

    void visit(FieldVisitor& v) {
        v.field(Field("world_size", "").required().at_least(1), world_size);
        v.field(Field("local_size", "").required().at_least(1), local_size);
        v.field(Field("compute_device", "").required().one_of({"cpu", "cuda"}), compute_device);
        v.section_list(Field("tables", "").required(), section_list_of(tables));
    }
};

// A plan for another world size is reported as that alone, before the rest of the file is read:
// its ranks, shards and ranks per node are all for that other world.
void check_world_size(ConfigDocument& doc, const PlacementEnv& env) {
    ConfigNode root = doc.root();
    const YAML::Node node = root.yaml().IsMap() ? root.yaml()["world_size"] : YAML::Node();
    int64_t world_size = 0;
    if (!node.IsDefined() || !node.IsScalar() ||
        !YAML::convert<int64_t>::decode(node, world_size) || world_size == env.world_size) {
        return;  // absent or malformed: the full read reports it
    }
    root.error_at("world_size",
                  fmt::format("the plan is for {} ranks, this run has {} (make one for this world "
                              "with `shardrec plan CONFIG --world-size {}`)",
                              world_size, env.world_size, env.world_size));
    doc.throw_if_errors();
}

// The file's node shape and device against the ones the plan is loaded for.
void check_world(const PlanFile& file, const PlacementEnv& env, ConfigNode& root) {
    if (file.local_size != env.local_size) {
        root.error_at("local_size",
                      fmt::format("the plan is for {} ranks per node, this run has {}",
                                  file.local_size, env.local_size));
    }
    if (file.compute_device != env.compute_device) {
        root.error_at("compute_device", fmt::format("the plan is for {}, this run computes on {}",
                                                    file.compute_device, env.compute_device));
    }
}

// One entry as a ParameterSharding; false (errors recorded) when a shard is malformed.
bool to_sharding(const TableEntry& entry, ConfigNode& node, ParameterSharding& ps) {
    ps.sharding_type = *parse_sharding_type(entry.sharding_type);
    ps.compute_kernel = *parse_compute_kernel(entry.compute_kernel);
    if (is_cached_kernel(ps.compute_kernel))
        ps.cache_params =
            CacheParams{entry.load_factor, *parse_cache_algorithm(entry.algorithm),
                        entry.precision.empty() ? std::nullopt
                                                : std::optional(dtype_from_name(entry.precision)),
                        entry.prefetch_pipeline};
    for (int64_t r : entry.ranks) {
        ps.ranks.push_back(static_cast<int>(std::min<int64_t>(r, 1 << 30)));
    }
    bool ok = true;
    ConfigNode shards_node = node.child("shards");
    for (size_t i = 0; i < entry.shards.size(); ++i) {
        const ShardEntry& s = entry.shards[i];
        ConfigNode shard_node = shards_node.at(i);
        const auto placed = parse_placement(s.placement);
        if (s.shard_offsets.size() != 2 || s.shard_sizes.size() != 2 || !placed) {
            shard_node.error(
                "needs shard_offsets [row, col], shard_sizes [rows, cols] and "
                "placement rank:R/device");
            ok = false;
            continue;
        }
        ShardMetadata m = *placed;
        m.shard_offsets = {s.shard_offsets[0], s.shard_offsets[1]};
        m.shard_sizes = {s.shard_sizes[0], s.shard_sizes[1]};
        ps.sharding_spec.push_back(m);
    }
    return ok;
}

ShardingPlan read_plan(ConfigDocument& doc,
                       const std::vector<ModelConfig::Table>& tables,
                       const PlacementEnv& env) {
    env.check();
    check_world_size(doc, env);
    PlanFile file;
    ConfigNode root = doc.root();
    read_fields(root, [&file](FieldVisitor& v) { file.visit(v); });
    doc.throw_if_errors();  // the checks below need well-formed entries
    check_world(file, env, root);
    ShardingPlan plan;
    plan.env = env;
    std::vector<std::string> names;
    for (const ModelConfig::Table& t : tables) {
        names.push_back(t.name);
    }
    ConfigNode list = root.child("tables");
    for (size_t i = 0; i < file.tables.size(); ++i) {
        const TableEntry& entry = file.tables[i];
        ConfigNode node = list.at(i);
        const auto table = std::find_if(tables.begin(), tables.end(),
                                        [&](const auto& t) { return t.name == entry.name; });
        if (table == tables.end()) {
            const std::string guess = closest_match(entry.name, names);
            node.error_at("name",
                          fmt::format("unknown table '{}'{}", entry.name,
                                      guess.empty() ? "" : " (did you mean '" + guess + "'?)"));
            continue;
        }
        if (plan.tables.count(entry.name) != 0) {
            node.error_at("name", fmt::format("table '{}' is listed twice", entry.name));
            continue;
        }
        ParameterSharding ps;
        if (!to_sharding(entry, node, ps)) {
            continue;
        }
        const std::string problem =
            layout_problem(ps, table->num_embeddings, table->embedding_dim, env);
        if (!problem.empty()) {
            node.error_at(
                "shards",
                fmt::format("{} of table '{}' [{}, {}]: {}", entry.sharding_type, entry.name,
                            table->num_embeddings, table->embedding_dim, problem));
            continue;
        }
        plan.tables[entry.name] = std::move(ps);
    }
    for (const std::string& name : names) {
        if (plan.tables.count(name) == 0 &&
            std::none_of(file.tables.begin(), file.tables.end(),
                         [&](const TableEntry& e) { return e.name == name; })) {
            root.error_at("tables", fmt::format("model table '{}' has no entry", name));
        }
    }
    doc.throw_if_errors();
    return plan;
}

}  // namespace

ShardingPlan load_plan(const std::string& path,
                       const std::vector<ModelConfig::Table>& tables,
                       const PlacementEnv& env) {
    ConfigDocument doc = ConfigDocument::parse_file(path, "the plan file (sharding.plan_file)");
    return read_plan(doc, tables, env);
}

ShardingPlan parse_plan(const std::string& text,
                        const std::vector<ModelConfig::Table>& tables,
                        const PlacementEnv& env,
                        const std::string& source_name) {
    ConfigDocument doc = ConfigDocument::parse_string(text, source_name);
    return read_plan(doc, tables, env);
}

std::string plan_to_yaml(const ShardingPlan& plan, const std::vector<ModelConfig::Table>& tables) {
    YAML::Emitter out;
    out << YAML::BeginMap;
    out << YAML::Key << "world_size" << YAML::Value << plan.env.world_size;
    out << YAML::Key << "local_size" << YAML::Value << plan.env.local_size;
    out << YAML::Key << "compute_device" << YAML::Value << plan.env.compute_device;
    out << YAML::Key << "tables" << YAML::Value << YAML::BeginSeq;
    for (const ModelConfig::Table& table : tables) {
        const ParameterSharding& ps = plan.at(table.name);
        out << YAML::BeginMap;
        out << YAML::Key << "name" << YAML::Value << table.name;
        out << YAML::Key << "sharding_type" << YAML::Value << sharding_type_name(ps.sharding_type);
        out << YAML::Key << "compute_kernel" << YAML::Value
            << compute_kernel_name(ps.compute_kernel);
        if (ps.cache_params) {
            out << YAML::Key << "cache_params" << YAML::Value << YAML::Flow << YAML::BeginMap
                << YAML::Key << "load_factor" << YAML::Value << ps.cache_params->load_factor
                << YAML::Key << "algorithm" << YAML::Value
                << cache_algorithm_name(ps.cache_params->algorithm);
            if (ps.cache_params->precision) {
                out << YAML::Key << "precision" << YAML::Value
                    << dtype_name(*ps.cache_params->precision);
            }
            if (ps.cache_params->prefetch_pipeline)
                out << YAML::Key << "prefetch_pipeline" << YAML::Value << true;
            out << YAML::EndMap;
        }
        out << YAML::Key << "ranks" << YAML::Value << YAML::Flow << ps.ranks;
        out << YAML::Key << "shards" << YAML::Value << YAML::BeginSeq;
        for (const ShardMetadata& s : ps.sharding_spec) {
            out << YAML::Flow << YAML::BeginMap;
            out << YAML::Key << "shard_offsets" << YAML::Value << YAML::Flow
                << std::vector<int64_t>(s.shard_offsets.begin(), s.shard_offsets.end());
            out << YAML::Key << "shard_sizes" << YAML::Value << YAML::Flow
                << std::vector<int64_t>(s.shard_sizes.begin(), s.shard_sizes.end());
            out << YAML::Key << "placement" << YAML::Value << s.placement();
            out << YAML::EndMap;
        }
        out << YAML::EndSeq << YAML::EndMap;
    }
    out << YAML::EndSeq << YAML::EndMap;
    return fmt::format("# shardrec sharding plan: {} rank{}, {} per node, {}\n{}\n",
                       plan.env.world_size, plan.env.world_size == 1 ? "" : "s",
                       plan.env.local_size, plan.env.compute_device, out.c_str());
}

}  // namespace shardrec
