// One field table per config struct, walked by three visitors: the strict reader, the YAML writer
// and the reference generator. A struct lists its fields once, in `visit(FieldVisitor&)`, so
// reading, the resolved dump and `shardrec validate --reference` cannot drift apart, and the
// defaults live only in the member initialisers (the writer and the docs read them from there).
//
//   void TrainConfig::visit(FieldVisitor& v) {
//       v.field(Field("steps", "optimizer steps to run").required().at_least(1), steps);
//       v.field(Field("log_every", "steps between train log lines").at_least(1), log_every);
//   }
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/yaml.h"

namespace shardrec {

// A field's key, doc line and rules, built with chained setters.
struct Field {
    Field(std::string key_, std::string doc_) : key(std::move(key_)), doc(std::move(doc_)) {}

    Field& required() {
        is_required = true;
        return *this;
    }

    // The value must be one of these strings (a `type:`-style choice).
    Field& one_of(std::vector<std::string> values) {
        choices = std::move(values);
        return *this;
    }

    // Bounds on a number, or on every element of a list of numbers.
    Field& at_least(double bound) {
        min = bound;
        return *this;
    }

    Field& greater_than(double bound) {
        min = bound;
        min_exclusive = true;
        return *this;
    }

    Field& at_most(double bound) {
        max = bound;
        return *this;
    }

    Field& less_than(double bound) {
        max = bound;
        max_exclusive = true;
        return *this;
    }

    Field& non_empty() {  // a list needs at least one element
        is_non_empty = true;
        return *this;
    }

    // The field exists only when `active` ("model.type is dlrm_dcn"): present otherwise, it is an
    // error; the writer leaves it out; the reference shows the condition.
    Field& only_if(bool active_, std::string condition_) {
        active = active_;
        condition = std::move(condition_);
        return *this;
    }

    // What the reference shows as the default when it is derived ("model.embedding_dim").
    Field& default_doc(std::string text) {
        default_text = std::move(text);
        return *this;
    }

    std::string key;
    std::string doc;
    bool is_required = false;
    std::vector<std::string> choices;
    std::optional<double> min;
    bool min_exclusive = false;
    std::optional<double> max;
    bool max_exclusive = false;
    bool is_non_empty = false;
    bool active = true;
    std::string condition;
    std::string default_text;
};

class FieldVisitor;

// A list of maps (model.tables): how a visitor sizes it and walks element i's fields.
struct SectionList {
    std::function<size_t()> size;
    std::function<void(size_t)> resize;
    std::function<void(size_t, FieldVisitor&)> visit;
};

template <typename T>
SectionList section_list_of(std::vector<T>& items) {
    return SectionList{[&items] { return items.size(); }, [&items](size_t n) { items.resize(n); },
                       [&items](size_t i, FieldVisitor& v) { items[i].visit(v); }};
}

class FieldVisitor {
public:
    using Fields = std::function<void(FieldVisitor&)>;
    // Runs after a section was read: derived defaults and rules across fields, recorded at node.
    using Resolve = std::function<void(ConfigNode&)>;

    FieldVisitor() = default;
    FieldVisitor(const FieldVisitor&) = delete;
    FieldVisitor& operator=(const FieldVisitor&) = delete;
    FieldVisitor(FieldVisitor&&) = delete;
    FieldVisitor& operator=(FieldVisitor&&) = delete;
    virtual ~FieldVisitor() = default;

    virtual void field(const Field& f, int64_t& value) = 0;
    virtual void field(const Field& f, double& value) = 0;
    virtual void field(const Field& f, bool& value) = 0;
    virtual void field(const Field& f, std::string& value) = 0;
    virtual void field(const Field& f, std::vector<int64_t>& value) = 0;
    virtual void field(const Field& f, std::vector<std::string>& value) = 0;
    virtual void section(const Field& f, const Fields& fields, const Resolve& resolve) = 0;
    virtual void section_list(const Field& f, const SectionList& list) = 0;

    void section(const Field& f, const Fields& fields) { section(f, fields, Resolve()); }

    // A key shardrec no longer reads: present, it is an unknown key that says why and what to do
    // instead (`why`), so an old config fails with a migration note rather than a bare "unknown
    // key". Only the reader sees it; the writer and the reference leave it out.
    virtual void removed(const std::string& /*key*/, const std::string& /*why*/) {}
};

// Reads `fields` from a map node, then reports the keys it did not ask for (node.finish()).
// Errors are recorded in the node's document; nothing throws.
void read_fields(ConfigNode& node, const FieldVisitor::Fields& fields);

// The fields as a YAML map (scalars written so that read_fields gives back the same values).
YAML::Node write_fields(const FieldVisitor::Fields& fields);

struct FieldDoc {
    std::string key;  // full dotted key, "model.tables[].embedding_dim"
    std::string type;
    std::string default_value;
    std::string doc;
};

// One row per field (sections and their fields in order); `prefix` is prepended to each key.
std::vector<FieldDoc> document_fields(const std::string& prefix,
                                      const FieldVisitor::Fields& fields);

// A Markdown table of the rows: | key | type | default | description |.
std::string format_field_docs(const std::vector<FieldDoc>& docs);

// Shortest text that reads back as the same double, always with a '.' or an exponent ("1.0").
std::string format_double(double value);

}  // namespace shardrec
