#include "engine/core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

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

DurableFileWriter::DurableFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp") {
    file_ = std::fopen(tmp_.c_str(), "wb");
    SR_CHECK(file_ != nullptr, "cannot create '{}': {}", tmp_, std::strerror(errno));
}

DurableFileWriter::~DurableFileWriter() {
    if (file_ != nullptr) {
        std::fclose(file_);
        std::remove(tmp_.c_str());
    }
}

void DurableFileWriter::write(const void* data, size_t bytes) {
    SR_CHECK(file_ != nullptr, "'{}' is already committed", path_);
    if (std::fwrite(data, 1, bytes, file_) != bytes) {
        const int err = errno;
        std::fclose(file_);
        file_ = nullptr;
        std::remove(tmp_.c_str());
        SR_CHECK(false, "cannot write '{}': {}", tmp_, std::strerror(err));
    }
    bytes_ += static_cast<int64_t>(bytes);
}

void DurableFileWriter::commit() {
    SR_CHECK(file_ != nullptr, "'{}' is already committed", path_);
    const bool synced = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
    const int err = errno;
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    if (!synced || !closed) {
        std::remove(tmp_.c_str());
    }
    SR_CHECK(synced && closed, "cannot write '{}': {}", tmp_, std::strerror(err));
    std::filesystem::rename(tmp_, path_);
    const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
    sync_directory(parent.empty() ? "." : parent.string());
}

void write_file_atomically(const std::string& path, const std::string& text) {
    DurableFileWriter writer(path);
    writer.write(text.data(), text.size());
    writer.commit();
}

}  // namespace shardrec
