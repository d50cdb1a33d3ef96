// Files that survive a crash or a power loss once written: contents flushed to the device
// (fsync) before the rename that publishes them, and the directory that holds the new name
// synced after it (rename is only durable once its directory is).
#pragma once

#include <string>

namespace shardrec {

// fsync of a directory, so the names created, renamed or removed in it are durable.
void sync_directory(const std::string& dir);

// Writes `text` to `path` through `path`.tmp: written, synced, renamed, the directory synced.
// A reader sees the old file or the whole new one, never a part.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace shardrec
