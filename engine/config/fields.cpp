// The three walkers of a field table: strict reader, YAML writer, reference generator.
#include "engine/config/fields.h"

#include <fmt/format.h>

#include <algorithm>

namespace shardrec {

std::string format_double(double value) {
    std::string s = fmt::format("{}", value);
    // YAML 1.1 readers (PyYAML) take "1e-08" for a string: a float needs its '.'.
    if (s.find_first_of(".n") == std::string::npos) {
        const size_t e = s.find('e');
        s.insert(e == std::string::npos ? s.size() : e, ".0");
    }
    return s;
}

namespace {

std::string bounds_text(const Field& f) {
    std::string s;
    if (f.min) {
        s += fmt::format("{} {}", f.min_exclusive ? ">" : ">=", *f.min);
    }
    if (f.max) {
        s += fmt::format("{}{} {}", s.empty() ? "" : ", ", f.max_exclusive ? "<" : "<=", *f.max);
    }
    return s;
}

// ---- reader ----

class FieldReader final : public FieldVisitor {
public:
    explicit FieldReader(ConfigNode& node) : node_(node) {}

    void field(const Field& f, int64_t& value) override { read_number(f, value); }

    void field(const Field& f, double& value) override { read_number(f, value); }

    void field(const Field& f, bool& value) override {
        if (auto node = present(f)) {
            node->read(value);
        }
    }

    void field(const Field& f, std::string& value) override {
        auto node = present(f);
        std::string s;
        if (!node || !node->read(s)) {
            return;
        }
        if (!f.choices.empty() &&
            std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end()) {
            const std::string guess = closest_match(s, f.choices);
            node->error(fmt::format("expected one of {}, got {}{}", fmt::join(f.choices, ", "),
                                    node->describe(),
                                    guess.empty() ? "" : " (did you mean '" + guess + "'?)"));
            return;
        }
        value = s;
    }

    void field(const Field& f, std::vector<int64_t>& value) override { read_list(f, value); }

    void field(const Field& f, std::vector<std::string>& value) override { read_list(f, value); }

    void section(const Field& f, const Fields& fields, const Resolve& resolve) override {
        if (!f.active) {
            present(f);  // only reports the key when it is there
            return;
        }
        // An absent section is read as empty, so its required fields are reported by path.
        ConfigNode node = node_.child(f.key);
        if (!node.is_defined() && f.is_required) {
            node_.error_missing(f.key);
        }
        if (!node.expect_map()) {
            return;
        }
        FieldReader reader(node);
        fields(reader);
        node.finish();
        if (resolve) {
            resolve(node);
        }
    }

    void section_list(const Field& f, const SectionList& list) override {
        auto node = present(f);
        if (!node || !node->expect_sequence()) {
            return;
        }
        if (f.is_non_empty && node->size() == 0) {
            node->error("needs at least one element");
        }
        list.resize(node->size());
        for (size_t i = 0; i < node->size(); ++i) {
            ConfigNode element = node->at(i);
            if (!element.expect_map()) {
                continue;
            }
            FieldReader reader(element);
            list.visit(i, reader);
            element.finish();
        }
    }

    void removed(const std::string& key, const std::string& why) override {
        if (node_.has(key)) {
            node_.error_at(key, "unknown key: " + why);
        }
    }

private:
    // The field's node when it is there and allowed; records "missing" / "only valid when".
    std::optional<ConfigNode> present(const Field& f) {
        const bool has = node_.has(f.key);
        if (!f.active) {
            if (has) {
                node_.error_at(f.key, fmt::format("only valid when {}", f.condition));
            }
            return std::nullopt;
        }
        if (!has) {
            if (f.is_required) {
                node_.error_missing(f.key);
            }
            return std::nullopt;
        }
        return node_.child(f.key);
    }

    static bool in_bounds(const Field& f, ConfigNode& node, double x) {
        const bool low_ok = !f.min || (f.min_exclusive ? x > *f.min : x >= *f.min);
        const bool high_ok = !f.max || (f.max_exclusive ? x < *f.max : x <= *f.max);
        if (low_ok && high_ok) {
            return true;
        }
        node.error(fmt::format("must be {}, got {}", bounds_text(f), node.describe()));
        return false;
    }

    template <typename T>
    void read_number(const Field& f, T& value) {
        auto node = present(f);
        T x{};
        if (!node || !node->read(x)) {
            return;
        }
        if (in_bounds(f, *node, static_cast<double>(x))) {
            value = x;
        }
    }

    template <typename T>
    void read_list(const Field& f, std::vector<T>& value) {
        auto node = present(f);
        std::vector<T> items;
        if (!node || !node->read(items)) {
            return;
        }
        bool ok = true;
        if (f.is_non_empty && items.empty()) {
            node->error("needs at least one element");
            ok = false;
        }
        if constexpr (std::is_arithmetic_v<T>) {
            for (size_t i = 0; i < items.size(); ++i) {
                ConfigNode element = node->at(i);
                ok = in_bounds(f, element, static_cast<double>(items[i])) && ok;
            }
        }
        if (ok) {
            value = std::move(items);
        }
    }

    ConfigNode& node_;
};

// ---- writer ----

class FieldWriter final : public FieldVisitor {
public:
    explicit FieldWriter(YAML::Node& out) : out_(out) {}

    void field(const Field& f, int64_t& value) override { put(f, std::to_string(value)); }

    void field(const Field& f, double& value) override { put(f, format_double(value)); }

    void field(const Field& f, bool& value) override { put(f, value ? "true" : "false"); }

    void field(const Field& f, std::string& value) override { put(f, value); }

    void field(const Field& f, std::vector<int64_t>& value) override {
        std::vector<std::string> items;
        items.reserve(value.size());
        for (int64_t x : value) {
            items.push_back(std::to_string(x));
        }
        put_list(f, items);
    }

    void field(const Field& f, std::vector<std::string>& value) override { put_list(f, value); }

    void section(const Field& f, const Fields& fields, const Resolve&) override {
        if (!f.active) {
            return;
        }
        YAML::Node map(YAML::NodeType::Map);
        FieldWriter writer(map);
        fields(writer);
        out_[f.key] = map;
    }

    void section_list(const Field& f, const SectionList& list) override {
        if (!f.active) {
            return;
        }
        YAML::Node seq(YAML::NodeType::Sequence);
        for (size_t i = 0; i < list.size(); ++i) {
            YAML::Node map(YAML::NodeType::Map);
            FieldWriter writer(map);
            list.visit(i, writer);
            map.SetStyle(YAML::EmitterStyle::Flow);  // one line per table
            seq.push_back(map);
        }
        out_[f.key] = seq;
    }

private:
    void put(const Field& f, const std::string& text) {
        if (f.active) {
            out_[f.key] = text;
        }
    }

    void put_list(const Field& f, const std::vector<std::string>& items) {
        if (!f.active) {
            return;
        }
        YAML::Node seq(YAML::NodeType::Sequence);
        for (const std::string& item : items) {
            seq.push_back(item);
        }
        seq.SetStyle(YAML::EmitterStyle::Flow);
        out_[f.key] = seq;
    }

    YAML::Node& out_;
};

// ---- reference ----

class FieldDocumenter final : public FieldVisitor {
public:
    FieldDocumenter(std::string prefix, std::vector<FieldDoc>& out)
        : prefix_(std::move(prefix)), out_(out) {}

    void field(const Field& f, int64_t& value) override { add(f, "int", std::to_string(value)); }

    void field(const Field& f, double& value) override { add(f, "float", format_double(value)); }

    void field(const Field& f, bool& value) override { add(f, "bool", value ? "true" : "false"); }

    void field(const Field& f, std::string& value) override {
        add(f, "string", value.empty() ? "\"\"" : value);
    }

    void field(const Field& f, std::vector<int64_t>& value) override {
        add(f, "list of int", fmt::format("[{}]", fmt::join(value, ", ")));
    }

    void field(const Field& f, std::vector<std::string>& value) override {
        add(f, "list of string", fmt::format("[{}]", fmt::join(value, ", ")));
    }

    void section(const Field& f, const Fields& fields, const Resolve&) override {
        add(f, "map", "");
        FieldDocumenter inner(prefix_ + f.key + ".", out_);
        fields(inner);
    }

    void section_list(const Field& f, const SectionList& list) override {
        add(f, "list of maps", "");
        // Documents a default element: the caller walks a scratch copy of its config.
        if (list.size() == 0) {
            list.resize(1);
        }
        FieldDocumenter inner(prefix_ + f.key + "[].", out_);
        list.visit(0, inner);
    }

private:
    void add(const Field& f, const std::string& type, const std::string& default_value) {
        FieldDoc d;
        d.key = prefix_ + f.key;
        d.type = f.choices.empty() ? type : fmt::format("one of: {}", fmt::join(f.choices, ", "));
        d.default_value = f.is_required             ? "required"
                          : !f.default_text.empty() ? f.default_text
                                                    : default_value;
        d.doc = f.doc;
        std::vector<std::string> rules;
        if (f.is_non_empty) {
            rules.push_back("not empty");
        }
        const std::string bounds = bounds_text(f);
        if (!bounds.empty()) {
            rules.push_back(type.rfind("list", 0) == 0 ? "each " + bounds : bounds);
        }
        if (!rules.empty()) {
            d.doc += fmt::format(" ({})", fmt::join(rules, "; "));
        }
        if (!f.condition.empty()) {
            d.doc += fmt::format(". Only when {}", f.condition);
        }
        out_.push_back(std::move(d));
    }

    std::string prefix_;
    std::vector<FieldDoc>& out_;
};

std::string escape_cell(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '|') {
            out += '\\';
        }
        out += c;
    }
    return out;
}

}  // namespace

void read_fields(ConfigNode& node, const FieldVisitor::Fields& fields) {
    if (!node.expect_map()) {
        return;
    }
    FieldReader reader(node);
    fields(reader);
    node.finish();
}

YAML::Node write_fields(const FieldVisitor::Fields& fields) {
    YAML::Node map(YAML::NodeType::Map);
    FieldWriter writer(map);
    fields(writer);
    return map;
}

std::vector<FieldDoc> document_fields(const std::string& prefix,
                                      const FieldVisitor::Fields& fields) {
    std::vector<FieldDoc> docs;
    FieldDocumenter documenter(prefix, docs);
    fields(documenter);
    return docs;
}

std::string format_field_docs(const std::vector<FieldDoc>& docs) {
    std::string out = "| key | type | default | description |\n|---|---|---|---|\n";
    for (const FieldDoc& d : docs) {
        out += fmt::format("| `{}` | {} | {} | {} |\n", d.key, escape_cell(d.type),
                           escape_cell(d.default_value), escape_cell(d.doc));
    }
    return out;
}

}  // namespace shardrec
