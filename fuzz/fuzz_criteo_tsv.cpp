// libFuzzer target: the Criteo TSV line parser. Any bytes must give either "" (parsed) or a
// message naming a field, never a crash; a parsed line must have a 0/1 label and print back to
// text that parses to the same values.
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/data/criteo_tsv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardrec::data;
    const std::string_view line(reinterpret_cast<const char*>(data), size);
    CriteoLine parsed;
    const std::string error = parse_criteo_line(line, parsed);
    if (!error.empty()) {
        if (error.find("field") == std::string::npos && error.find("fields") == std::string::npos &&
            error.find("label") == std::string::npos) {
            std::fprintf(stderr, "an error that names no field: %s\n", error.c_str());
            std::abort();
        }
        return 0;
    }
    if (parsed.label != 0 && parsed.label != 1) {
        std::abort();
    }
    std::string text = std::to_string(parsed.label);
    for (int64_t v : parsed.dense) {
        text += fmt::format("\t{}", v);
    }
    for (uint64_t v : parsed.sparse) {
        text += fmt::format("\t{:x}", v);
    }
    CriteoLine again;
    if (!parse_criteo_line(text, again).empty() || again.label != parsed.label ||
        again.dense != parsed.dense || again.sparse != parsed.sparse) {
        std::fprintf(stderr, "does not round-trip: %s\n", text.c_str());
        std::abort();
    }
    return 0;
}
