// Slicing-by-4 table CRC-32: about four times the byte-at-a-time speed, still a few lines.
#include "engine/core/crc32.h"

#include <array>
#include <cstring>

namespace shardrec {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 4>;

Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) {
            c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
        for (size_t s = 1; s < 4; ++s) {
            t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
        }
    }
    return t;
}

const Tables& tables() {
    static const Tables t = make_tables();
    return t;
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
    const Tables& t = tables();
    const auto* p = static_cast<const unsigned char*>(data);
    crc = ~crc;
    // Four bytes per step, little-endian word order (the hosts we run on).
    while (size >= 4) {
        uint32_t word;
        std::memcpy(&word, p, 4);
        crc ^= word;
        crc = t[3][crc & 0xffu] ^ t[2][(crc >> 8) & 0xffu] ^ t[1][(crc >> 16) & 0xffu] ^
              t[0][crc >> 24];
        p += 4;
        size -= 4;
    }
    while (size-- > 0) {
        crc = t[0][(crc ^ *p++) & 0xffu] ^ (crc >> 8);
    }
    return ~crc;
}

}  // namespace shardrec
