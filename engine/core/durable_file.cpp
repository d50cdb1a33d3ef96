#include "engine/core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/core/error.h"

namespace shardrec {

void sync_directory(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    SR_CHECK(fd >= 0, "cannot open the directory '{}': {}", dir, std::strerror(errno));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    // Some file systems cannot sync a directory (EINVAL): their renames are as durable as they get.
    SR_CHECK(rc == 0 || err == EINVAL, "cannot sync the directory '{}': {}", dir,
             std::strerror(err));
}

void write_file_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    SR_CHECK(f != nullptr, "cannot create '{}': {}", tmp, std::strerror(errno));
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool synced = written && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    const int err = errno;
    const bool closed = std::fclose(f) == 0;
    if (!synced || !closed) {
        std::remove(tmp.c_str());
    }
    SR_CHECK(synced && closed, "cannot write '{}': {}", tmp, std::strerror(err));
    std::filesystem::rename(tmp, path);
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    sync_directory(parent.empty() ? "." : parent.string());
}

}  // namespace shardrec
