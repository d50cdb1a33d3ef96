// CRC-32 (the zlib / PNG / gzip polynomial 0xEDB88320, reflected), in-tree so that shard
// checksums need no extra library; `crc32` tools and Python's zlib.crc32 give the same values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardrec {

// The CRC of `size` bytes continuing from `crc` (0 to start): crc32(b, crc32(a)) == crc32(a + b).
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace shardrec
