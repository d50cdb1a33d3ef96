// Files that survive a crash or a power loss once written: contents flushed to the device
// (fsync) before the rename that publishes them, and the directory that holds the new name
// synced after it (rename is only durable once its directory is).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace shardrec {

// fsync of a directory, so the names created, renamed or removed in it are durable.
void sync_directory(const std::string& dir);

// Writes `text` to `path` through `path`.tmp: written, synced, renamed, the directory synced.
// A reader sees the old file or the whole new one, never a part.
void write_file_atomically(const std::string& path, const std::string& text);

// A file written piece by piece through `path`.tmp (a table of any size in bounded memory), then
// published as write_file_atomically publishes a whole one: commit() syncs, renames and syncs the
// directory. Destroyed without commit() (an error on the way), the temporary file is removed.
class DurableFileWriter {
public:
    explicit DurableFileWriter(std::string path);
    ~DurableFileWriter();
    DurableFileWriter(const DurableFileWriter&) = delete;
    DurableFileWriter& operator=(const DurableFileWriter&) = delete;

    // An Error names the file and the reason (a full disk: "No space left on device").
    void write(const void* data, size_t bytes);
    void commit();

    int64_t bytes() const { return bytes_; }

private:
    std::string path_, tmp_;
    std::FILE* file_ = nullptr;
    int64_t bytes_ = 0;
};

}  // namespace shardrec
