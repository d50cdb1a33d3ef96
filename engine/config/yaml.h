// Strict YAML reading for configs (STYLE.md R11). Every node knows its dotted path
// ("model.tables[3].embedding_dim") and where it came from (file:line:col, or the `--set` that made
// it). Typed reads say what was expected and what was found, keys nobody asked for are errors with
// a did-you-mean, and all errors of a document are collected before one Error lists them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace shardrec {

struct ConfigReadState;  // the source name, the overrides and the error list of one document

// A view of one node of a ConfigDocument. Map children are reached with has()/child(), which also
// mark the key as known; finish() then reports every key of the map that was never asked for.
// Reads never throw: a mismatch records an error and leaves the output unchanged.
class ConfigNode {
public:
    const std::string& path() const { return path_; }  // "" for the document root

    std::string location() const;  // "configs/x.yaml:12:5" or "--set model.x=1"

    const YAML::Node& yaml() const { return node_; }

    bool is_defined() const { return node_.IsDefined(); }

    bool is_null() const { return node_.IsDefined() && node_.IsNull(); }

    // ---- maps ----
    bool has(const std::string& key);          // present (and not only a duplicate); marks known
    ConfigNode child(const std::string& key);  // undefined node when absent; marks known
    void mark_known(const std::string& key);
    bool expect_map();  // a map, or absent/null (read as empty); otherwise records an error
    void finish();      // records unknown keys (with a suggestion) and duplicate keys

    // ---- sequences ----
    bool expect_sequence();  // records an error unless this is a sequence
    size_t size() const;
    ConfigNode at(size_t index);

    // ---- scalars and lists of scalars ----
    bool read(int64_t& out);
    bool read(double& out);
    bool read(bool& out);
    bool read(std::string& out);
    bool read(std::vector<int64_t>& out);
    bool read(std::vector<std::string>& out);

    // Records "location: path: message".
    void error(const std::string& message);
    // Records "location: path.key: missing required key", located at this map's own key.
    void error_missing(const std::string& key);
    // Records "location: path.key: message" for a key of this map, present or not.
    void error_at(const std::string& key, const std::string& message);

    // "'abc'", "a map", "a list" or "nothing (null)": what a read found, for error messages.
    std::string describe() const;

private:
    friend class ConfigDocument;

    ConfigNode(const YAML::Node& node,
               YAML::Mark mark,
               YAML::Mark key_mark,
               std::string path,
               std::shared_ptr<ConfigReadState> state);
    std::string child_path(const std::string& key) const;
    bool expect_scalar(const char* expected);

    YAML::Node node_;
    YAML::Mark mark_;      // the value's mark, or its key's when the value has none
    YAML::Mark key_mark_;  // the key naming this node (missing keys of a map are reported there)
    std::string path_;
    std::shared_ptr<ConfigReadState> state_;
    std::set<std::string> known_;
};

// One parsed YAML document plus the errors found while applying overrides and reading it.
class ConfigDocument {
public:
    // Throw Error at once for an unreadable file or a YAML syntax error (nothing to read then).
    // `what` names the file in errors: "the plan file (sharding.plan_file) 'p' does not exist".
    static ConfigDocument parse_file(const std::string& path,
                                     const std::string& what = "the config file");
    static ConfigDocument parse_string(const std::string& text, const std::string& source_name);
    static ConfigDocument from_node(const YAML::Node& node, const std::string& source_name);

    // Applies "dotted.path[i].key=value" overrides in order before reading. The value is parsed
    // as YAML (scalar or flow: "[1, 2]", "{a: 1}"). Missing map keys are created, so a typo comes
    // back as an unknown key located at "--set ...". Malformed overrides are recorded errors.
    void apply_overrides(const std::vector<std::string>& overrides);

    ConfigNode root();

    const std::string& source_name() const;
    const std::vector<std::string>& errors() const;
    // Throws one Error whose message lists every recorded error, one per line.
    void throw_if_errors() const;

private:
    ConfigDocument(const YAML::Node& root, std::shared_ptr<ConfigReadState> state);
    void apply_override(const std::string& text);

    YAML::Node root_;
    std::shared_ptr<ConfigReadState> state_;
};

// The candidate closest to `word` when it is close enough to be a likely typo, else "".
// Distance: optimal-string-alignment (Damerau) edit distance, case-insensitive; a candidate's
// '_'-separated parts also count ("dimm" suggests "embedding_dim").
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// Optimal-string-alignment distance: insertions, deletions, substitutions, adjacent swaps.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace shardrec
