// The shared state behind the ConfigNodes of one ConfigDocument (internal to engine/config): the
// source name, the overrides applied (to locate their errors at "--set ...") and the error list.
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace shardrec {

struct ConfigReadState {
    struct Override {
        std::string path;     // the node it assigned, "model.tables[0].embedding_dim"
        std::string created;  // the first map key it had to create, "" when none
        std::string text;     // as given: "model.tables[0].embedding_dim=32"
    };

    std::string source;
    std::vector<Override> overrides;
    std::vector<std::string> errors;

    // `path` is at or below `root` ("a.b" is below "a" and "a[2]" is below "a", "ab" is not).
    static bool is_under(const std::string& path, const std::string& root) {
        if (root.empty() || path.compare(0, root.size(), root) != 0) {
            return false;
        }
        return path.size() == root.size() || path[root.size()] == '.' || path[root.size()] == '[';
    }

    std::string location(const YAML::Mark& mark, const std::string& path) const {
        // The latest override wins, as it does for the value.
        for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
            if (is_under(path, it->path) || is_under(path, it->created)) {
                return "--set " + it->text;
            }
        }
        std::string where = mark.is_null()
                                ? source
                                : fmt::format("{}:{}:{}", source, mark.line + 1, mark.column + 1);
        // A node some of whose keys came from --set: its errors may be about those.
        std::string below;
        for (const Override& o : overrides) {
            if (!path.empty() && (is_under(o.path, path) || is_under(o.created, path)))
                below += (below.empty() ? "" : ", ") + ("--set " + o.text);
        }
        return below.empty() ? where : where + " (with " + below + ")";
    }

    void record(const YAML::Mark& mark, const std::string& path, const std::string& message) {
        errors.push_back(fmt::format("{}: {}: {}", location(mark, path),
                                     path.empty() ? "(top level)" : path, message));
    }
};

}  // namespace shardrec
