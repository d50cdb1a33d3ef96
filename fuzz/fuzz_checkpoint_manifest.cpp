// libFuzzer target: the checkpoint manifest reader. The first byte picks what the rest is: 0 a
// manifest's text as is (the manifest_crc32 check refuses nearly every mutation), 1 a text whose
// manifest_crc32 line the harness writes for it (so the YAML and the sanity checks behind it are
// reached). A manifest that parses must write back (manifest_to_yaml) to a text that parses to
// the same facts. Anything else must throw shardrec::Error, never crash or read out of bounds.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/core/crc32.h"
#include "engine/core/error.h"
#include "engine/train/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardrec;
    if (size == 0) {
        return 0;
    }
    std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] % 2 == 1) {
        const size_t at = text.rfind("\nmanifest_crc32:");
        text = text.substr(0, at == std::string::npos ? text.size() : at + 1);
        if (!text.empty() && text.back() != '\n') {
            text += '\n';
        }
        char line[40];
        std::snprintf(line, sizeof(line), "manifest_crc32: 0x%08x\n",
                      crc32(text.data(), text.size()));
        text += line;
    }
    train::CheckpointManifest m;
    try {
        m = train::parse_manifest(text, "fuzz/manifest.yaml");
    } catch (const Error&) {
        return 0;
    }
    // What parsed writes back and parses to the same facts.
    const train::CheckpointManifest back =
        train::parse_manifest(train::manifest_to_yaml(m), "fuzz/written.yaml");
    if (back.step != m.step || back.samples != m.samples || back.run_id != m.run_id ||
        back.world_size != m.world_size || back.tables.size() != m.tables.size() ||
        back.files.size() != m.files.size() || back.dense.size() != m.dense.size()) {
        std::abort();
    }
    return 0;
}
