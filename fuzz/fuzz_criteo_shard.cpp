// libFuzzer target: the binary shard reader and the manifest parser of Criteo data. The first
// byte picks what the rest is: 0 a manifest's text, 1 a shard image as is, 2 a shard image whose
// header checksum the harness repairs first (so the size, record and payload checks are reached).
// Each must accept or throw shardrec::Error, never crash or read out of bounds (ASan).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/crc32.h"
#include "engine/core/error.h"
#include "engine/data/criteo_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardrec::data;
    if (size == 0) {
        return 0;
    }
    const int mode = data[0] % 3;
    std::vector<uint8_t> bytes(data + 1, data + size);  // an exact-size heap copy for ASan
    try {
        if (mode == 0) {
            (void)parse_criteo_manifest(std::string(bytes.begin(), bytes.end()), "fuzz.json");
            return 0;
        }
        if (mode == 2 && bytes.size() >= kShardHeaderBytes) {
            const uint32_t crc = shardrec::crc32(bytes.data(), 60);
            std::memcpy(bytes.data() + 60, &crc, 4);  // little-endian, as the writer
        }
        uint32_t record_bytes = 0;
        if (bytes.size() >= 16) {
            std::memcpy(&record_bytes, bytes.data() + 12, 4);
        }
        (void)check_shard(bytes.data(), bytes.size(), "fuzz.bin", record_bytes, true);
        (void)parse_shard_header(bytes.data(), bytes.size(), "fuzz.bin");
    } catch (const shardrec::Error&) {
    }
    return 0;
}
