// "Did you mean": the known key closest to a misspelt one, by optimal-string-alignment distance.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "engine/config/yaml.h"

namespace shardrec {
namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
        if (i == s.size() || s[i] == sep) {
            parts.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    }
    return parts;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
    const size_t n = a.size();
    const size_t m = b.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
    for (size_t i = 0; i <= n; ++i) {
        d[i][0] = i;
    }
    for (size_t j = 0; j <= m; ++j) {
        d[0][j] = j;
    }
    for (size_t i = 1; i <= n; ++i) {
        for (size_t j = 1; j <= m; ++j) {
            const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
            }
        }
    }
    return d[n][m];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
    const std::string w = lower(word);
    // Short words only tolerate one edit: "lr" is not a typo of "id".
    const size_t threshold = w.size() <= 2 ? 1 : std::max<size_t>(2, w.size() / 4);
    std::string best;
    size_t best_score = threshold + 1;
    for (const std::string& candidate : candidates) {
        const std::string c = lower(candidate);
        size_t score = edit_distance(w, c);
        const std::vector<std::string> parts = split(c, '_');
        if (parts.size() > 1) {
            // A typo of one part of a compound key ("dimm" for "embedding_dim") costs one more.
            for (const std::string& part : parts) {
                if (!part.empty()) {
                    score = std::min(score, edit_distance(w, part) + 1);
                }
            }
        }
        if (score < best_score) {
            best_score = score;
            best = candidate;
        }
    }
    return best;
}

}  // namespace shardrec
