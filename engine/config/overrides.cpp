// `--set dotted.path[i].key=value`: edits the YAML tree before it is read, so an override goes
// through exactly the same checks as the file, and its errors are located at "--set ...".
// `--set key=null` removes a map key, so its default applies (e.g. data.criteo_binary=null after
// data.type=synthetic).
#include <fmt/format.h>

#include <cctype>
#include <optional>

#include "engine/config/read_state.h"
#include "engine/config/yaml.h"

namespace shardrec {
namespace {

struct PathStep {
    bool is_index = false;
    std::string key;   // map key, when !is_index
    size_t index = 0;  // sequence index, when is_index
};

// "a.b[2][0].c" -> a, b, [2], [0], c. Empty on a malformed path.
std::optional<std::vector<PathStep>> parse_path(const std::string& path) {
    std::vector<PathStep> steps;
    size_t i = 0;
    while (i < path.size()) {
        size_t end = i;
        while (end < path.size() && path[end] != '.' && path[end] != '[') {
            ++end;
        }
        if (end == i) {
            return std::nullopt;  // an empty key: "a..b", ".a" or "[0]" first
        }
        steps.push_back(PathStep{false, path.substr(i, end - i), 0});
        i = end;
        while (i < path.size() && path[i] == '[') {
            const size_t close = path.find(']', i);
            if (close == std::string::npos || close == i + 1) {
                return std::nullopt;
            }
            size_t index = 0;
            for (size_t k = i + 1; k < close; ++k) {
                if (!std::isdigit(static_cast<unsigned char>(path[k]))) {
                    return std::nullopt;
                }
                index = index * 10 + static_cast<size_t>(path[k] - '0');
            }
            steps.push_back(PathStep{true, "", index});
            i = close + 1;
        }
        if (i < path.size()) {
            if (path[i] != '.' || i + 1 == path.size()) {
                return std::nullopt;
            }
            ++i;
        }
    }
    if (steps.empty()) {
        return std::nullopt;
    }
    return steps;
}

bool has_key(const YAML::Node& map, const std::string& key) {
    if (!map.IsMap()) {
        return false;
    }
    for (auto it = map.begin(); it != map.end(); ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == key) {
            return true;
        }
    }
    return false;
}

}  // namespace

void ConfigDocument::apply_override(const std::string& text) {
    ConfigReadState& state = *state_;
    auto fail = [&](const std::string& message) {
        state.errors.push_back(fmt::format("--set {}: {}", text, message));
    };
    const size_t eq = text.find('=');
    if (eq == std::string::npos) {
        return fail("expected KEY=VALUE (e.g. train.steps=100)");
    }
    const auto steps = parse_path(text.substr(0, eq));
    if (!steps) {
        return fail("malformed key (expected dotted.names with optional [index])");
    }
    const std::string raw = text.substr(eq + 1);
    const bool remove = raw == "null" || raw == "Null" || raw == "NULL" || raw == "~";
    YAML::Node value;
    try {
        value = YAML::Load(raw);
    } catch (const YAML::Exception& e) {
        return fail(fmt::format("cannot parse the value as YAML: {}", e.msg));
    }

    YAML::Node cur(root_);  // a handle; reset() moves it down without touching the tree
    std::string walked;
    std::string created;
    for (size_t s = 0; s < steps->size(); ++s) {
        const PathStep& step = (*steps)[s];
        const bool last = s + 1 == steps->size();
        if (step.is_index) {
            if (!cur.IsSequence()) {
                return fail(fmt::format("{} is not a list", walked));
            }
            if (step.index >= cur.size()) {
                return fail(
                    fmt::format("{} has {} elements, no [{}]", walked, cur.size(), step.index));
            }
            walked += fmt::format("[{}]", step.index);
            if (last) {
                cur[step.index] = value;
            } else {
                YAML::Node next = cur[step.index];
                cur.reset(next);
            }
            continue;
        }
        if (!cur.IsMap() && !cur.IsNull()) {
            return fail(fmt::format("{} is not a map", walked.empty() ? "the document" : walked));
        }
        if (!walked.empty()) {
            walked += '.';
        }
        walked += step.key;
        const bool present = has_key(cur, step.key);
        if (remove && !present) {
            return fail(fmt::format("{} is not set, so there is nothing to remove", walked));
        }
        if (!present && created.empty()) {
            created = walked;
        }
        if (last) {
            if (remove) {
                cur.remove(step.key);
            } else {
                cur[step.key] = value;
            }
        } else {
            if (!present) {
                cur[step.key] = YAML::Node(YAML::NodeType::Map);
            }
            YAML::Node next = cur[step.key];
            cur.reset(next);
        }
    }
    state.overrides.push_back(ConfigReadState::Override{walked, created, text});
}

}  // namespace shardrec
