// The sharding section: the planner, the default sharding type and kernel, and per-table entries.
// What needs the world size (ranks in range, whole nodes) is checked when the plan is built
// (engine/distributed/sharding_plan.cpp), with each entry's recorded location.
#include <fmt/format.h>

#include <map>
#include <numeric>

#include "engine/config/config.h"
#include "engine/config/sharding_names.h"

namespace shardrec {

void ShardingConfig::Cache::visit(FieldVisitor& v, bool entry) {
    Field lf("load_factor",
             "cache slots as a fraction of each shard's rows (key_value, fused_uvm_caching)");
    Field alg("algorithm",
              "the row a full cache evicts: lru (least recently used) or lfu (least "
              "frequently used, ties by recency)");
    Field prec("precision",
               "the dtype of the cached rows: f32, f16 or bf16 (updated in f32, stored rounded to "
               "it; the rows on disk keep the table's data_type); \"\": the table's data_type");
    if (entry) {
        // Absent: 0, the section's (resolve); given, in the section's bounds.
        v.field(lf.default_doc("sharding.cache.load_factor").greater_than(0).at_most(1),
                load_factor);
        v.field(alg.default_doc("sharding.cache.algorithm").one_of({"", "lru", "lfu"}), algorithm);
        v.field(prec.default_doc("sharding.cache.precision").one_of({"", "f32", "f16", "bf16"}),
                precision);
    } else {
        v.field(lf.greater_than(0).at_most(1), load_factor);
        v.field(alg.one_of({"lru", "lfu"}), algorithm);
        v.field(prec.one_of({"", "f32", "f16", "bf16"}), precision);
        v.field(Field("prefetch_pipeline",
                      "the caches are filled by train.pipeline prefetch_sparse_dist (required "
                      "then), beside the compute: the planner counts their misses' time as "
                      "overlapped with the step instead of added to it (TorchRec's "
                      "CacheParams.prefetch_pipeline)"),
                prefetch_pipeline);
        v.field(Field("sample_batches",
                      "global batches of the training data the planner reads to measure each "
                      "cached table's ids on data other than synthetic (TorchRec's "
                      "CacheStatistics: a batch's distinct rows and an ideal cache's hit rate "
                      "at its load_factor), for its miss time and `shardrec plan`'s predicted hit "
                      "rate; 0: ids taken as uniform over the rows")
                    .at_least(0),
                sample_batches);
    }
}

void ShardingConfig::Storage::visit(FieldVisitor& v) {
    v.field(Field("path",
                  "key_value tables: a local directory for their row files (each "
                  "process writes under path/shardrec-<host>-<pid>-<n>/ and removes it at its "
                  "end)"),
            path);
}

void ShardingConfig::Table::visit(FieldVisitor& v) {
    v.field(Field("name", "a model table").required(), name);
    v.field(Field("sharding_type", "how the table is split; auto planner: \"\" lets it choose")
                .default_doc("sharding.sharding_type"),
            sharding_type);
    v.field(Field("compute_kernel",
                  "fused, key_value, fused_uvm, fused_uvm_caching, or dense: data_parallel's "
                  "kernel (sharded tables train with the fused optimizer only), refused with any "
                  "other sharding_type; with the auto planner and no sharding_type, dense makes "
                  "the table data_parallel")
                .default_doc("sharding.compute_kernel"),
            compute_kernel);
    v.section(Field("cache", "this table's cache (key_value, fused_uvm_caching)"),
              [this](FieldVisitor& s) { cache.visit(s, true); });
    v.field(Field("ranks", "the rank of each shard; empty: the default placement").at_least(0),
            ranks);
    v.field(
        Field("column_widths", "column_wise: columns of each shard; empty: even split").at_least(1),
        column_widths);
}

void ShardingConfig::visit(FieldVisitor& v) {
    v.field(Field("planner", "manual: the rules below; auto: the cost-model planner")
                .one_of({"manual", "auto"}),
            planner);
    v.field(Field("sharding_type", "type of the tables without an entry (manual planner)")
                .one_of(sharding_type_names()),
            sharding_type);
    v.field(Field("compute_kernel",
                  "kernel of the tables without one: fused (rows in memory); key_value (CPU: "
                  "rows on disk under storage.path, a cache in DRAM); fused_uvm (CUDA: rows in "
                  "pinned host memory the GPU reads in place); fused_uvm_caching (CUDA: rows "
                  "in host memory, a cache in HBM); dense (data_parallel's "
                  "kernel: manual planner only with "
                  "sharding_type data_parallel; auto planner: those tables become data_parallel)")
                .one_of(compute_kernel_names()),
            compute_kernel);
    v.section(Field("cache", "the cache of key_value and fused_uvm_caching tables"),
              [this](FieldVisitor& s) { cache.visit(s, false); });
    v.section(Field("storage", "the disk tier of key_value tables"),
              [this](FieldVisitor& s) { storage.visit(s); });
    v.field(Field("plan_file", "a saved plan (`shardrec plan --out`) used as is; \"\": none"),
            plan_file);
    v.field(Field("topology", "topology YAML for the auto planner; \"\": default for the device"),
            topology);
    v.field(Field("replica_groups",
                  "2D parallelism: R groups of world / R consecutive ranks (whole nodes, or a "
                  "part of one); the plan is made for one group and every group holds that "
                  "sharding, each replica's embedding gradients summed with the others' before "
                  "the fused update; must divide the world size (CPU)")
                .at_least(1),
            replica_groups);
    v.section_list(Field("tables", "per-table choices"), section_list_of(tables));
}

namespace {

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
    const std::string guess = closest_match(word, candidates);
    return guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess);
}

// TorchRec's DENSE kernel on a sharded table (gradient materialised, dense optimizer) is not
// implemented; refused here rather than trained by the fused kernel behind the config's back.
std::string dense_kernel_problem(const std::string& table, const std::string& type) {
    return fmt::format(
        "table '{}' is {}: the dense compute kernel (gradient materialised and applied by the "
        "dense optimizer) is only for data_parallel tables; use fused, or sharding_type: "
        "data_parallel",
        table, type);
}

// The section's kernel applies to the tables without an entry (and to entries without one).
// Manual: dense only fits when they are data_parallel (which use dense anyway); auto: dense
// narrows the planner to data_parallel for them.
bool section_refuses_dense(const ShardingConfig& section) {
    return section.compute_kernel == "dense" && section.planner == "manual" &&
           section.sharding_type != "data_parallel";
}

// The entry's type and kernel, canonical ("rw" becomes "row_wise"), defaults filled in.
void resolve_names(ShardingConfig::Table& t, const ShardingConfig& section, ConfigNode& node) {
    if (t.sharding_type.empty() && section.planner == "manual") {
        t.sharding_type = section.sharding_type;
    }
    if (!t.sharding_type.empty()) {
        const auto type = parse_sharding_type(t.sharding_type);
        if (!type) {
            node.error_at("sharding_type",
                          fmt::format("unknown sharding type '{}', expected one of {}{}",
                                      t.sharding_type, fmt::join(sharding_type_names(), ", "),
                                      suggestion(t.sharding_type, sharding_type_names())));
            return;
        }
        t.sharding_type = sharding_type_name(*type);
    }
    const bool dp = t.sharding_type == "data_parallel";
    if (t.compute_kernel.empty()) {
        t.compute_kernel = dp ? "dense" : section.compute_kernel;
        // Inherited dense: refused once, at sharding.compute_kernel, unless that one is allowed
        // (all data_parallel) and only this entry's type differs.
        if (!dp && !t.sharding_type.empty() && t.compute_kernel == "dense" &&
            !section_refuses_dense(section)) {
            node.error_at("compute_kernel", dense_kernel_problem(t.name, t.sharding_type));
        }
    } else if (!parse_compute_kernel(t.compute_kernel)) {
        node.error_at("compute_kernel",
                      fmt::format("unknown compute kernel '{}', expected one of {}{}",
                                  t.compute_kernel, fmt::join(compute_kernel_names(), ", "),
                                  suggestion(t.compute_kernel, compute_kernel_names())));
    } else if (dp && t.compute_kernel != "dense") {
        node.error_at("compute_kernel", "data_parallel tables use the dense kernel");
    } else if (!dp && !t.sharding_type.empty() && t.compute_kernel == "dense") {
        node.error_at("compute_kernel", dense_kernel_problem(t.name, t.sharding_type));
    }
}

// Rules that need only the table: widths for column_wise, adding up to its dim.
void check_shape(const ShardingConfig::Table& t,
                 const ModelConfig::Table& table,
                 ConfigNode& node) {
    if (t.sharding_type.empty() && !t.ranks.empty()) {
        node.error_at("ranks", "give the sharding_type these ranks are for");
    }
    if (t.sharding_type == "table_wise" && t.ranks.size() > 1) {
        node.error_at("ranks", fmt::format("table_wise takes one rank, got {}", t.ranks.size()));
    }
    if (t.column_widths.empty()) {
        return;
    }
    if (t.sharding_type != "column_wise") {
        node.error_at("column_widths", "only valid when sharding_type is column_wise");
        return;
    }
    const int64_t total =
        std::accumulate(t.column_widths.begin(), t.column_widths.end(), int64_t{0});
    if (total != table.embedding_dim) {
        node.error_at("column_widths", fmt::format("add up to {}, table '{}' has {} columns", total,
                                                   table.name, table.embedding_dim));
    }
    if (!t.ranks.empty() && t.ranks.size() != t.column_widths.size()) {
        node.error_at("column_widths",
                      fmt::format("{} widths for {} ranks: give one width per shard",
                                  t.column_widths.size(), t.ranks.size()));
    }
}

// The kernel's tier against the device: key_value is the CPU's (its cache lives in DRAM),
// fused_uvm and fused_uvm_caching the GPU's (rows in host memory, read in place or cached in HBM).
std::string kernel_device_problem(const std::string& kernel, const std::string& device) {
    const bool cuda = device.rfind("cuda", 0) == 0;
    if (cuda && kernel == "key_value") {
        return fmt::format(
            "key_value is the CPU's disk tier with a DRAM cache, and runtime.device is {}: on a "
            "GPU, tables train with fused (rows in device memory), fused_uvm (rows in host "
            "memory) or fused_uvm_caching (rows in host memory, a cache in HBM)",
            device);
    }
    if (!cuda && (kernel == "fused_uvm" || kernel == "fused_uvm_caching")) {
        return fmt::format(
            "{} keeps a GPU's rows in host memory, and runtime.device is {}: on the CPU, "
            "tables train with fused (rows in memory) or key_value (rows on disk, a cache in "
            "memory)",
            kernel, device);
    }
    return "";
}

}  // namespace

std::string ShardingConfig::kernel_of(const std::string& table) const {
    for (const Table& t : tables) {
        if (t.name == table && !t.compute_kernel.empty())
            return t.compute_kernel;
    }
    return compute_kernel;
}

const ShardingConfig::Cache& ShardingConfig::cache_of(const std::string& table) const {
    for (const Table& t : tables) {
        if (t.name == table)
            return t.cache;
    }
    return cache;
}

namespace {

// Cache and storage: an entry's cache takes the section's values where it gives none; the
// kernels fit the device; key_value tables have a storage path.
void resolve_tiers(ShardingConfig& section,
                   ConfigNode& node,
                   const RuntimeConfig& runtime,
                   const TrainConfig& train) {
    if (section.cache.prefetch_pipeline && train.pipeline != "prefetch_sparse_dist") {
        node.child("cache").error_at(
            "prefetch_pipeline",
            fmt::format("the caches are filled ahead only by train.pipeline "
                        "prefetch_sparse_dist, and train.pipeline is {}: set it, or leave "
                        "prefetch_pipeline false",
                        train.pipeline));
    }
    const std::string problem = kernel_device_problem(section.compute_kernel, runtime.device);
    bool key_value = section.compute_kernel == "key_value";
    if (!problem.empty() && section.sharding_type != "data_parallel")
        node.error_at("compute_kernel", problem);
    ConfigNode list = node.child("tables");
    for (size_t i = 0; i < section.tables.size(); ++i) {
        ShardingConfig::Table& t = section.tables[i];
        if (t.cache.load_factor == 0)
            t.cache.load_factor = section.cache.load_factor;
        if (t.cache.algorithm.empty())
            t.cache.algorithm = section.cache.algorithm;
        if (t.cache.precision.empty())
            t.cache.precision = section.cache.precision;
        const std::string p = kernel_device_problem(t.compute_kernel, runtime.device);
        if (!p.empty() && p != problem)
            list.at(i).error_at("compute_kernel", fmt::format("table '{}': {}", t.name, p));
        key_value = key_value || t.compute_kernel == "key_value";
    }
    if (key_value && section.storage.path.empty()) {
        node.child("storage").error_at(
            "path",
            "key_value tables keep their rows on disk: give sharding.storage.path, a "
            "local directory");
    }
}

}  // namespace

void ShardingConfig::resolve(ConfigNode& node,
                             const ModelConfig& model,
                             const RuntimeConfig& runtime,
                             const TrainConfig& train) {
    if (!plan_file.empty() && (planner == "auto" || !tables.empty())) {
        const std::string fix =
            planner == "auto" && !tables.empty()
                ? "the auto planner and sharding.tables: set planner: manual and remove the "
                  "table entries (--set sharding.tables=null)"
            : planner == "auto"
                ? "the auto planner: set planner: manual"
                : "sharding.tables: remove its entries (--set sharding.tables=null)";
        node.error_at("plan_file",
                      fmt::format("a plan file replaces {}, or drop the plan file", fix));
    }
    if (section_refuses_dense(*this)) {
        node.error_at(
            "compute_kernel",
            fmt::format("dense (gradient materialised and applied by the dense optimizer) is only "
                        "for data_parallel tables, and the tables it applies to are {}; use "
                        "fused, or set sharding_type: data_parallel",
                        sharding_type));
    }
    std::vector<std::string> names;
    std::map<std::string, size_t> index_of;
    for (size_t i = 0; i < model.tables.size(); ++i) {
        names.push_back(model.tables[i].name);
        index_of.emplace(model.tables[i].name, i);
    }
    std::map<std::string, size_t> entry_of;
    ConfigNode list = node.child("tables");
    for (size_t i = 0; i < tables.size(); ++i) {
        ConfigNode entry = list.at(i);
        Table& t = tables[i];
        t.location = entry.location();
        const auto model_it = index_of.find(t.name);
        if (model_it == index_of.end()) {
            if (!t.name.empty()) {
                entry.error_at(
                    "name", fmt::format("unknown table '{}'{}", t.name, suggestion(t.name, names)));
            }
            continue;
        }
        const auto [it, fresh] = entry_of.emplace(t.name, i);
        if (!fresh) {
            entry.error_at("name", fmt::format("table '{}' already has an entry (tables[{}])",
                                               t.name, it->second));
        }
        resolve_names(t, *this, entry);
        check_shape(t, model.tables[model_it->second], entry);
    }
    resolve_tiers(*this, node, runtime, train);
}

}  // namespace shardrec
