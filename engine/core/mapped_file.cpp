#include "engine/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace shardrec {

Tensor map_file_region(const std::string& path, int64_t offset, int64_t bytes) {
    SR_CHECK(offset >= 0 && bytes >= 0, "map '{}': bytes [{}, {})", path, offset, offset + bytes);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    SR_CHECK(fd >= 0, "cannot open '{}': {}", path, std::strerror(errno));

    struct stat st {};

    const bool stat_ok = ::fstat(fd, &st) == 0;
    const int stat_errno = errno;
    if (!stat_ok || offset + bytes > st.st_size) {
        ::close(fd);
        SR_CHECK(stat_ok, "cannot stat '{}': {}", path, std::strerror(stat_errno));
        SR_CHECK(false, "'{}' holds {} bytes, not the {} bytes at {} asked for", path, st.st_size,
                 bytes, offset);
    }
    if (bytes == 0) {
        ::close(fd);
        return Tensor::empty({0}, DType::kU8);
    }
    // mmap maps whole pages from a page boundary: map from the page holding `offset`.
    const auto page = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
    const int64_t start = offset / page * page;
    const auto length = static_cast<size_t>(offset + bytes - start);
    void* base = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(start));
    const int map_errno = errno;
    ::close(fd);  // the mapping keeps the file
    SR_CHECK(base != MAP_FAILED, "cannot map {} bytes of '{}': {}", length, path,
             std::strerror(map_errno));
    std::shared_ptr<const void> mapping(
        base, [length](const void* p) { ::munmap(const_cast<void*>(p), length); });
    return Tensor::from_blob(static_cast<uint8_t*>(base) + (offset - start), {bytes}, DType::kU8,
                             std::move(mapping));
}

}  // namespace shardrec
