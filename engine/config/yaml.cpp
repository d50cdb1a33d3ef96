#include "engine/config/yaml.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>

#include "engine/config/read_state.h"
#include "engine/core/error.h"
#include "engine/core/input_file.h"

namespace shardrec {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

// The first entry of map `node` whose key is the scalar `key` (yaml-cpp keeps duplicates).
bool find_entry(const YAML::Node& node,
                const std::string& key,
                YAML::Node* value,
                YAML::Mark* key_mark) {
    if (!node.IsMap()) {
        return false;
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == key) {
            *value = it->second;
            *key_mark = it->first.Mark();
            return true;
        }
    }
    return false;
}

}  // namespace

// ---- ConfigNode ----

ConfigNode::ConfigNode(const YAML::Node& node,
                       YAML::Mark mark,
                       YAML::Mark key_mark,
                       std::string path,
                       std::shared_ptr<ConfigReadState> state)
    : node_(node),
      mark_(mark),
      key_mark_(key_mark),
      path_(std::move(path)),
      state_(std::move(state)) {}

std::string ConfigNode::location() const {
    return state_->location(mark_, path_);
}

std::string ConfigNode::child_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
}

void ConfigNode::error(const std::string& message) {
    state_->record(mark_, path_, message);
}

void ConfigNode::error_missing(const std::string& key) {
    state_->record(key_mark_, child_path(key), "missing required key");
}

void ConfigNode::error_at(const std::string& key, const std::string& message) {
    child(key).error(message);
}

std::string ConfigNode::describe() const {
    if (!node_.IsDefined()) {
        return "nothing";
    }
    if (node_.IsNull()) {
        return "nothing (null)";
    }
    if (node_.IsMap()) {
        return "a map";
    }
    if (node_.IsSequence()) {
        return "a list";
    }
    const std::string& s = node_.Scalar();
    return s.size() <= 40 ? "'" + s + "'" : "'" + s.substr(0, 37) + "...'";
}

bool ConfigNode::has(const std::string& key) {
    known_.insert(key);
    YAML::Node value;
    YAML::Mark key_mark;
    return find_entry(node_, key, &value, &key_mark);
}

void ConfigNode::mark_known(const std::string& key) {
    known_.insert(key);
}

ConfigNode ConfigNode::child(const std::string& key) {
    known_.insert(key);
    YAML::Node value;
    YAML::Mark key_mark = mark_;
    if (!find_entry(node_, key, &value, &key_mark)) {
        return ConfigNode(YAML::Node(YAML::NodeType::Undefined), key_mark_, key_mark_,
                          child_path(key), state_);
    }
    // A null value's mark points past it (at the next line), so name the key's line instead.
    const bool value_mark_usable = !value.IsNull() && !value.Mark().is_null();
    return ConfigNode(value, value_mark_usable ? value.Mark() : key_mark, key_mark, child_path(key),
                      state_);
}

bool ConfigNode::expect_map() {
    if (!node_.IsDefined() || node_.IsNull() || node_.IsMap()) {
        return true;
    }
    error(fmt::format("expected a map, got {}", describe()));
    return false;
}

void ConfigNode::finish() {
    if (!node_.IsMap()) {
        return;
    }
    const std::vector<std::string> candidates(known_.begin(), known_.end());
    std::map<std::string, int> first_line;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
        const YAML::Mark key_mark = it->first.Mark();
        if (!it->first.IsScalar()) {
            state_->record(key_mark, path_, "keys must be plain names");
            continue;
        }
        const std::string& key = it->first.Scalar();
        const std::string path = child_path(key);
        const auto seen = first_line.find(key);
        if (seen != first_line.end()) {
            state_->record(key_mark, path,
                           fmt::format("duplicate key (first at line {})", seen->second));
            continue;
        }
        first_line[key] = key_mark.line + 1;
        if (known_.count(key)) {
            continue;
        }
        const std::string suggestion = closest_match(key, candidates);
        state_->record(key_mark, path,
                       suggestion.empty()
                           ? std::string("unknown key")
                           : fmt::format("unknown key (did you mean '{}'?)", suggestion));
    }
}

bool ConfigNode::expect_sequence() {
    if (node_.IsSequence()) {
        return true;
    }
    error(fmt::format("expected a list, got {}", describe()));
    return false;
}

size_t ConfigNode::size() const {
    return node_.IsSequence() ? node_.size() : 0;
}

ConfigNode ConfigNode::at(size_t index) {
    const std::string path = fmt::format("{}[{}]", path_, index);
    if (index >= size()) {
        return ConfigNode(YAML::Node(YAML::NodeType::Undefined), mark_, mark_, path, state_);
    }
    const YAML::Node& self = node_;  // const access never converts the node
    YAML::Node value = self[index];
    const YAML::Mark mark = value.Mark().is_null() ? mark_ : value.Mark();
    return ConfigNode(value, mark, mark, path, state_);
}

// ---- typed reads ----

bool ConfigNode::expect_scalar(const char* expected) {
    if (node_.IsScalar()) {
        return true;
    }
    error(fmt::format("expected {}, got {}", expected, describe()));
    return false;
}

bool ConfigNode::read(int64_t& out) {
    if (!expect_scalar("an integer")) {
        return false;
    }
    const std::string& s = node_.Scalar();
    const size_t skip = !s.empty() && s[0] == '+' ? 1 : 0;
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(s.data() + skip, s.data() + s.size(), value);
    if (s.size() == skip || ec != std::errc() || end != s.data() + s.size()) {
        error(fmt::format(ec == std::errc::result_out_of_range
                              ? "expected an integer, got {} (out of the 64-bit range)"
                              : "expected an integer, got {}",
                          describe()));
        return false;
    }
    out = value;
    return true;
}

bool ConfigNode::read(double& out) {
    if (!expect_scalar("a number")) {
        return false;
    }
    const std::string& s = node_.Scalar();
    char* end = nullptr;
    const double value = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(value)) {
        error(fmt::format("expected a number, got {}", describe()));
        return false;
    }
    out = value;
    return true;
}

bool ConfigNode::read(bool& out) {
    if (!expect_scalar("true or false")) {
        return false;
    }
    const std::string s = lower(node_.Scalar());
    if (s != "true" && s != "false") {
        error(fmt::format("expected true or false, got {}", describe()));
        return false;
    }
    out = s == "true";
    return true;
}

bool ConfigNode::read(std::string& out) {
    if (!expect_scalar("a string")) {
        return false;
    }
    out = node_.Scalar();
    return true;
}

namespace {

template <typename T>
bool read_list(ConfigNode& node, std::vector<T>& out) {
    if (!node.expect_sequence()) {
        return false;
    }
    std::vector<T> values(node.size());
    bool ok = true;
    for (size_t i = 0; i < values.size(); ++i) {
        ok = node.at(i).read(values[i]) && ok;
    }
    if (ok) {
        out = std::move(values);
    }
    return ok;
}

}  // namespace

bool ConfigNode::read(std::vector<int64_t>& out) {
    return read_list(*this, out);
}

bool ConfigNode::read(std::vector<std::string>& out) {
    return read_list(*this, out);
}

// ---- ConfigDocument ----

ConfigDocument::ConfigDocument(const YAML::Node& root, std::shared_ptr<ConfigReadState> state)
    : root_(root), state_(std::move(state)) {}

ConfigDocument ConfigDocument::parse_file(const std::string& path, const std::string& what) {
    const std::string text = read_input_file(path, what);
    try {
        auto state = std::make_shared<ConfigReadState>();
        state->source = path;
        return ConfigDocument(YAML::Load(text), std::move(state));
    } catch (const YAML::ParserException& e) {
        throw Error(fmt::format("{}: {}:{}:{}: YAML syntax error: {}", error_context(), path,
                                e.mark.line + 1, e.mark.column + 1, e.msg));
    }
}

ConfigDocument ConfigDocument::parse_string(const std::string& text,
                                            const std::string& source_name) {
    try {
        auto state = std::make_shared<ConfigReadState>();
        state->source = source_name;
        return ConfigDocument(YAML::Load(text), std::move(state));
    } catch (const YAML::ParserException& e) {
        throw Error(fmt::format("{}: {}:{}:{}: YAML syntax error: {}", error_context(), source_name,
                                e.mark.line + 1, e.mark.column + 1, e.msg));
    }
}

ConfigDocument ConfigDocument::from_node(const YAML::Node& node, const std::string& source_name) {
    auto state = std::make_shared<ConfigReadState>();
    state->source = source_name;
    // Work on a copy so overrides never write into the caller's tree (a clone has no marks, so
    // errors then name the source only).
    return ConfigDocument(YAML::Clone(node), std::move(state));
}

ConfigNode ConfigDocument::root() {
    const YAML::Mark mark = root_.Mark().is_null() ? YAML::Mark() : root_.Mark();
    ConfigNode node(root_, mark, mark, "", state_);
    if (root_.IsDefined() && !root_.IsNull() && !root_.IsMap()) {
        node.error(fmt::format("expected a map at the top level, got {}", node.describe()));
    }
    return node;
}

const std::string& ConfigDocument::source_name() const {
    return state_->source;
}

const std::vector<std::string>& ConfigDocument::errors() const {
    return state_->errors;
}

void ConfigDocument::throw_if_errors() const {
    const auto& errors = state_->errors;
    if (errors.empty()) {
        return;
    }
    throw Error(fmt::format("{}: invalid config '{}' ({} error{}):\n  {}", error_context(),
                            state_->source, errors.size(), errors.size() == 1 ? "" : "s",
                            fmt::join(errors, "\n  ")));
}

void ConfigDocument::apply_overrides(const std::vector<std::string>& overrides) {
    for (const std::string& text : overrides) {
        apply_override(text);
    }
}

}  // namespace shardrec
