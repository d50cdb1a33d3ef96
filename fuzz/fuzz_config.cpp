// libFuzzer target: the strict YAML config reader. Any text must either parse into a resolved
// Config or throw shardrec::Error (a message, never a crash, a hang or another exception type);
// a parsed config must dump to YAML that parses back to the same dump (same source name, as the
// dump names its source in its first line).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/config/config.h"
#include "engine/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    shardrec::Config config;
    try {
        config = shardrec::parse_config(text, {}, "fuzz.yaml");
    } catch (const shardrec::Error&) {
        return 0;  // rejected with a message: fine
    }
    const std::string dumped = shardrec::dump_config(config);
    std::string again;
    try {
        again = shardrec::dump_config(shardrec::parse_config(dumped, {}, "fuzz.yaml"));
    } catch (const shardrec::Error& e) {
        std::fprintf(stderr, "the dump of an accepted config is rejected:\n%s\n%s\n",
                     dumped.c_str(), e.what());
        std::abort();
    }
    if (again != dumped) {
        std::fprintf(stderr, "the dump does not round-trip:\n%s\n---\n%s\n", dumped.c_str(),
                     again.c_str());
        std::abort();
    }
    return 0;
}
