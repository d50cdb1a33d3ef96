// The model section: type, tables, MLP sizes and the per-type sub-sections, with the rules
// that tie them together (one embedding dim for the interaction, the logit at the end).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "engine/config/config.h"

namespace shardrec {

void ModelConfig::Table::visit(FieldVisitor& v) {
    v.field(Field("name", "table name, unique in the model").required(), name);
    v.field(Field("num_embeddings", "rows").required().at_least(1), num_embeddings);
    v.field(Field("embedding_dim", "columns").at_least(1).default_doc("model.embedding_dim"),
            embedding_dim);
    v.field(Field("feature_names", "the sparse features looked up in this table")
                .default_doc("[f_<name>]"),
            feature_names);
    v.field(Field("pooling", "how a bag of rows becomes one vector").one_of({"sum", "mean"}),
            pooling);
    v.field(Field("pooling_factor", "mean ids per sample and feature").greater_than(0),
            pooling_factor);
    v.field(Field("data_type", "storage type of the rows").one_of({"f32", "f16", "bf16"}),
            data_type);
    v.field(Field("weighted", "its features carry a weight per id"), weighted);
    v.field(Field("position_weights",
                  "n > 0: the id at position j < n of a bag is weighted by a learned weight "
                  "(TorchRec PositionWeightedModule, max_feature_length); longer bags are an "
                  "error. 0: none")
                .at_least(0),
            position_weights);
    v.section(Field("managed_collision",
                    "raw 64-bit ids remapped to rows without hashing collisions (TorchRec "
                    "MCHManagedCollisionModule); absent: ids are rows"),
              [this](FieldVisitor& s) { managed_collision.visit(s); });
}

void ModelConfig::Table::ManagedCollision::visit(FieldVisitor& v) {
    v.field(Field("zch_size",
                  "slots that each hold one id (zero collision); num_embeddings must be "
                  "zch_size + mch_size; with mch_size 0 the last slot is the row of ids without "
                  "a slot. 0: no managed collision")
                .at_least(0),
            zch_size);
    v.field(Field("eviction_policy",
                  "which slots new ids take at an eviction: lfu (fewest uses), lru (least "
                  "recently used), distance_lfu (uses / steps since the last use)")
                .one_of({"lfu", "lru", "distance_lfu"}),
            eviction_policy);
    v.field(Field("decay_exponent",
                  "lru and distance_lfu (TorchRec's decay_exponent): distance_lfu scores uses / "
                  "(steps since the last use + 1)^decay_exponent, so above 1 recency weighs more, "
                  "below 1 frequency; lru's order is the same for any value")
                .greater_than(0),
            decay_exponent);
    v.field(Field("eviction_interval", "steps between evictions").at_least(1), eviction_interval);
    v.field(Field("threshold",
                  "which of an interval's ids count at its eviction pass (TorchRec's "
                  "threshold_filtering_func): a new id that fails takes no evicted slot, a "
                  "mapped one keeps its count and last from before the interval; none; average "
                  "(count > the mean count of the interval's ids); dynamic:N (count > N * the "
                  "mean, N an integer, default 10); probabilistic:p (with probability 1 - (1 - "
                  "p)^count, drawn from (train.seed, id, step); default p 0.01)"),
            threshold);
    v.field(Field("input_hash_size",
                  "raw ids are taken modulo this (as unsigned 64-bit); 0: 2^63 (TorchRec's "
                  "default)")
                .at_least(0),
            input_hash_size);
    v.field(Field("mch_size",
                  "residual rows after the zch slots: an id without a slot goes to row "
                  "zch_size + hash(id) mod mch_size (with buckets, a row of the id's bucket)")
                .at_least(0),
            mch_size);
    v.field(Field("total_num_buckets",
                  "ids are split by a hash into this many buckets, each with zch_size / K slots "
                  "and mch_size / K residual rows of its own, in rows [b * num_embeddings / K, "
                  "(b + 1) * num_embeddings / K); a bucket's remap state lives on the rank that "
                  "holds its first row, so with K a multiple of the ranks a row_wise table's "
                  "state is split like its rows. Part of the model: the same K gives the same "
                  "slots on any number of ranks")
                .at_least(1),
            total_num_buckets);
}

void ModelConfig::Dcn::visit(FieldVisitor& v) {
    v.field(Field("num_layers", "low-rank cross layers").at_least(1), num_layers);
    v.field(Field("low_rank", "rank of each cross layer's weight").at_least(1), low_rank);
}

void ModelConfig::DeepFm::visit(FieldVisitor& v) {
    v.field(
        Field("hidden", "layer sizes of the deep MLP over the embeddings").non_empty().at_least(1),
        hidden);
}

void ModelConfig::visit(FieldVisitor& v) {
    v.field(Field("type", "model architecture").required().one_of({"dlrm", "dlrm_dcn", "deepfm"}),
            type);
    v.field(Field("dense_in_features", "dense (float) features per sample").at_least(1),
            dense_in_features);
    v.field(Field("embedding_dim", "default embedding dim of the tables; 0: none").at_least(0),
            embedding_dim);
    v.section_list(Field("tables", "embedding tables").required().non_empty(),
                   section_list_of(tables));
    v.field(Field("bottom_mlp",
                  "layer sizes of the dense-feature MLP; the last is the "
                  "embedding dim")
                .required()
                .non_empty()
                .at_least(1),
            bottom_mlp);
    v.field(Field("top_mlp", "layer sizes of the MLP after the interaction; the last is 1")
                .required()
                .non_empty()
                .at_least(1),
            top_mlp);
    v.section(Field("dcn", "the DCNv2 cross network")
                  .only_if(type == "dlrm_dcn", "model.type is dlrm_dcn"),
              [this](FieldVisitor& s) { dcn.visit(s); });
    v.section(
        Field("deepfm", "the DeepFM deep part").only_if(type == "deepfm", "model.type is deepfm"),
        [this](FieldVisitor& s) { deepfm.visit(s); });
}

void ModelConfig::from_yaml(ConfigNode& node) {
    read_fields(node, [this](FieldVisitor& v) { visit(v); });
    resolve(node);
}

YAML::Node ModelConfig::to_yaml() const {
    ModelConfig copy = *this;
    return write_fields([&copy](FieldVisitor& v) { copy.visit(v); });
}

namespace {

// Table dims default to model.embedding_dim, feature names to "f_<name>".
void fill_table_defaults(ModelConfig& model, ConfigNode& tables_node) {
    for (size_t i = 0; i < model.tables.size(); ++i) {
        ModelConfig::Table& table = model.tables[i];
        if (table.embedding_dim == 0) {
            if (model.embedding_dim > 0) {
                table.embedding_dim = model.embedding_dim;
            } else {
                tables_node.at(i).error_at(
                    "embedding_dim", "missing: set it on the table or as model.embedding_dim");
            }
        }
        if (table.feature_names.empty() && !table.name.empty()) {
            table.feature_names = {"f_" + table.name};
        }
    }
}

// The grammar of managed_collision.threshold (engine/modules/managed_collision.cpp
// parse_threshold_filter reads it; the config layer sits below the modules, so it is checked
// here as well).
std::string check_threshold(const std::string& text) {
    const size_t colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    const std::string arg = colon == std::string::npos ? "" : text.substr(colon + 1);
    const bool has_arg = colon != std::string::npos;
    char* end = nullptr;
    if ((kind == "none" || kind == "average") && !has_arg) {
        return "";
    }
    if (kind == "dynamic") {
        const long long m = has_arg ? std::strtoll(arg.c_str(), &end, 10) : 10;
        if (!has_arg || (!arg.empty() && *end == '\0' && m >= 1)) {
            return "";
        }
        return fmt::format("dynamic:N needs an integer N >= 1, not '{}'", arg);
    }
    if (kind == "probabilistic") {
        const double p = has_arg ? std::strtod(arg.c_str(), &end) : 0.01;
        if (!has_arg || (!arg.empty() && *end == '\0' && p > 0.0 && p <= 1.0)) {
            return "";
        }
        return fmt::format("probabilistic:p needs a probability 0 < p <= 1, not '{}'", arg);
    }
    return fmt::format("unknown threshold '{}': none, average, dynamic[:N] or probabilistic[:p]",
                       text);
}

// TorchRec asserts that a managed-collision module's output_size() (zch_size + mch_size) is the
// table's num_embeddings.
void check_managed_collision(const ModelConfig::Table& table, ConfigNode& node) {
    const ModelConfig::Table::ManagedCollision& mc = table.managed_collision;
    if (mc.zch_size == 0) {  // none (the written config carries the section on every table)
        return;
    }
    ConfigNode mc_node = node.child("managed_collision");
    const int64_t k = std::max<int64_t>(mc.total_num_buckets, 1);
    if (mc.zch_size % k != 0 || mc.mch_size % k != 0) {
        mc_node.error_at("total_num_buckets",
                         fmt::format("table '{}': zch_size {} and mch_size {} must both be "
                                     "multiples of total_num_buckets {}",
                                     table.name, mc.zch_size, mc.mch_size, k));
    } else if (mc.mch_size == 0 && mc.zch_size / k < 2) {
        mc_node.error_at("zch_size",
                         k == 1 ? std::string("must be >= 2 with mch_size 0 (the last slot is "
                                              "the row of ids without a slot)")
                                : fmt::format("must be >= 2 * total_num_buckets ({}) with "
                                              "mch_size 0 (each bucket's last slot is the row "
                                              "of its ids without a slot)",
                                              2 * k));
    }
    if (mc.zch_size + mc.mch_size != table.num_embeddings) {
        mc_node.error_at("zch_size",
                         fmt::format("table '{}': zch_size {} + mch_size {} must equal "
                                     "num_embeddings {}",
                                     table.name, mc.zch_size, mc.mch_size, table.num_embeddings));
    }
    const std::string bad = check_threshold(mc.threshold);
    if (!bad.empty()) {
        mc_node.error_at("threshold", bad);
    }
}

// Table names are unique, each feature is looked up in exactly one table (TorchRec), and a
// table's features are weighted by the data or by position, not both.
void check_names(const ModelConfig& model, ConfigNode& tables_node) {
    std::map<std::string, size_t> table_of_name;
    std::map<std::string, size_t> table_of_feature;
    for (size_t i = 0; i < model.tables.size(); ++i) {
        const ModelConfig::Table& table = model.tables[i];
        ConfigNode node = tables_node.at(i);
        const auto [it, fresh] = table_of_name.emplace(table.name, i);
        if (!fresh && !table.name.empty()) {
            node.error_at("name", fmt::format("duplicate table name '{}' (also tables[{}])",
                                              table.name, it->second));
        }
        if (table.weighted && table.position_weights > 0) {
            node.error_at("position_weights",
                          fmt::format("table '{}' is weighted: its features carry weights from "
                                      "the data or position weights, not both",
                                      table.name));
        }
        check_managed_collision(table, node);
        for (const std::string& feature : table.feature_names) {
            const auto [f_it, f_fresh] = table_of_feature.emplace(feature, i);
            if (!f_fresh && f_it->second != i) {
                node.error_at("feature_names",
                              fmt::format("feature '{}' is already looked up in tables[{}] ('{}')",
                                          feature, f_it->second, model.tables[f_it->second].name));
            } else if (!f_fresh) {
                node.error_at("feature_names",
                              fmt::format("feature '{}' is listed twice", feature));
            }
        }
    }
}

// DLRM's dot interaction, DCN's concatenation into square cross layers and DeepFM's pairwise
// factorisation machine all combine the dense vector with the pooled embeddings element-wise,
// so every table and the bottom MLP's output share one dim.
void check_shapes(const ModelConfig& model, ConfigNode& node) {
    if (!model.top_mlp.empty() && model.top_mlp.back() != 1) {
        node.error_at("top_mlp", fmt::format("the last size must be 1 (the logit), got {}",
                                             model.top_mlp.back()));
    }
    if (model.tables.empty() || model.tables[0].embedding_dim <= 0) {
        return;
    }
    const int64_t dim = model.tables[0].embedding_dim;
    ConfigNode tables_node = node.child("tables");
    for (size_t i = 1; i < model.tables.size(); ++i) {
        const int64_t d = model.tables[i].embedding_dim;
        if (d > 0 && d != dim) {
            tables_node.at(i).error_at(
                "embedding_dim",
                fmt::format("{} needs one embedding dim for all tables: {} here, {} in tables[0]",
                            model.type, d, dim));
        }
    }
    if (!model.bottom_mlp.empty() && model.bottom_mlp.back() != dim) {
        node.error_at("bottom_mlp",
                      fmt::format("the last size must equal the embedding dim {}, got {}", dim,
                                  model.bottom_mlp.back()));
    }
}

}  // namespace

void ModelConfig::resolve(ConfigNode& node) {
    ConfigNode tables_node = node.child("tables");
    fill_table_defaults(*this, tables_node);
    check_names(*this, tables_node);
    check_shapes(*this, node);
}

}  // namespace shardrec
