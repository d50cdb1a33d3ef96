// Criteo TSV lines for tests, in the real format (label, 13 integers, 26 hex values, tabs), with
// empty fields and negative integers, each with its expected values computed independently of the
// engine's parser: the generator knows what it wrote.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/rng.h"

namespace shardrec::test {

struct CriteoSample {
    std::string line;  // without '\n'
    int label = 0;
    std::array<int64_t, 13> dense{};    // 0 where empty
    std::array<uint64_t, 26> sparse{};  // 0 where empty
};

// Sample `index` of stream `seed`: ~10% empty fields, ~10% negative integers, mixed-case hex.
inline CriteoSample criteo_sample(uint64_t seed, uint64_t index) {
    rng::Rng r(seed, index);
    CriteoSample s;
    s.label = r.uniform() < 0.3 ? 1 : 0;
    s.line = std::to_string(s.label);
    for (size_t j = 0; j < 13; ++j) {
        const double u = r.uniform();
        std::string field;
        if (u < 0.1) {
            s.dense[j] = 0;
        } else if (u < 0.2) {
            s.dense[j] = -r.randint(1, 4);
            field = std::to_string(s.dense[j]);
        } else {
            s.dense[j] = r.randint(0, 1 << (1 + r.randint(0, 20)));
            field = std::to_string(s.dense[j]);
        }
        s.line += "\t" + field;
    }
    for (size_t t = 0; t < 26; ++t) {
        std::string field;
        if (r.uniform() < 0.1) {
            s.sparse[t] = 0;
        } else {
            // A small vocabulary per feature so ids repeat, like the real data.
            s.sparse[t] =
                rng::hash(seed, 77, t, static_cast<uint64_t>(r.randint(0, 500))) & 0xffffffffull;
            field = fmt::format(r.uniform() < 0.2 ? "{:08X}" : "{:08x}", s.sparse[t]);
        }
        s.line += "\t" + field;
    }
    return s;
}

// Writes samples [first, first + count) of `seed` to `path`, one per line; returns them.
inline std::vector<CriteoSample> write_criteo_tsv(const std::string& path,
                                                  uint64_t seed,
                                                  uint64_t first,
                                                  uint64_t count) {
    std::vector<CriteoSample> out;
    std::ofstream f(path, std::ios::binary);
    for (uint64_t i = 0; i < count; ++i) {
        out.push_back(criteo_sample(seed, first + i));
        f << out.back().line << '\n';
    }
    return out;
}

}  // namespace shardrec::test
