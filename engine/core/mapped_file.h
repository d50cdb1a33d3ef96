// Read-only memory mappings of files: the bytes are read from the page cache where they lie,
// shared by every process that maps the same file (ranks on one host, a server and a batch
// job), and nothing is copied into the process.
#pragma once

#include <cstdint>
#include <string>

#include "engine/core/tensor.h"

namespace shardrec {

// Bytes [offset, offset + bytes) of the file at `path` as a u8 tensor on the mapping (mmap
// PROT_READ, MAP_PRIVATE), which lives as long as the tensor or a view of it. Read only: a write
// through it faults. An Error names the file when it cannot be opened or mapped, or is shorter.
Tensor map_file_region(const std::string& path, int64_t offset, int64_t bytes);

}  // namespace shardrec
