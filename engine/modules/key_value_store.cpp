#include "engine/modules/key_value_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/core/crc32.h"
#include "engine/core/error.h"

namespace shardrec {

namespace {

constexpr uint32_t kMagic = 0x5653524bu;           // "KRSV": a written record
constexpr int64_t kTrailerBytes = 8;               // crc32, magic
constexpr int64_t kDropBytes = int64_t{64} << 20;  // page-cache traffic between drops
constexpr int64_t kRunBytes = int64_t{1} << 20;    // the most one read or write moves

uint32_t load32(const char* p) {
    uint32_t v = 0;
    std::memcpy(&v, p, 4);
    return v;
}

}  // namespace

KeyValueStore::KeyValueStore(std::string path,
                             std::string owner,
                             int64_t rows,
                             int64_t payload_bytes)
    : path_(std::move(path)),
      owner_(std::move(owner)),
      rows_(rows),
      payload_bytes_(payload_bytes),
      record_bytes_((payload_bytes + kTrailerBytes + 7) / 8 * 8),
      record_of_(static_cast<size_t>(rows), 0) {
    SR_CHECK(rows >= 0 && payload_bytes > 0, "key_value {}: {} rows of {} bytes", owner_, rows,
             payload_bytes);
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    SR_CHECK(fd_ >= 0, "key_value {}: cannot create its row file {}: {}", owner_, path_,
             std::strerror(errno));
}

KeyValueStore::~KeyValueStore() {
    if (fd_ >= 0)
        ::close(fd_);
}

std::vector<int64_t> KeyValueStore::stored_rows() const {
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(stored_count_));
    for (size_t r = 0; r < record_of_.size(); ++r) {
        if (record_of_[r] != 0)
            out.push_back(static_cast<int64_t>(r));
    }
    return out;
}

// Rows in record order, runs of consecutive records each one system call (appended records of a
// step are consecutive): refs_ holds (record, index in the caller's arrays), ascending by record,
// equal records in the caller's order.
void KeyValueStore::sort_refs() {
    std::stable_sort(refs_.begin(), refs_.end(),
                     [](const Ref& x, const Ref& y) { return x.record < y.record; });
}

size_t KeyValueStore::run_end(size_t first) const {
    const size_t max_run = static_cast<size_t>(std::max<int64_t>(1, kRunBytes / record_bytes_));
    size_t end = first + 1;
    while (end < refs_.size() && end - first < max_run &&
           refs_[end].record == refs_[end - 1].record + 1)
        ++end;
    return end;
}

void KeyValueStore::read(const int64_t* rows, int64_t n, char* dst) {
    refs_.clear();
    for (int64_t i = 0; i < n; ++i) {
        const int64_t row = rows[i];
        SR_CHECK(row >= 0 && row < rows_ && stored(row), "key_value {}: row {} is not in {}",
                 owner_, row, path_);
        refs_.push_back({record_of_[static_cast<size_t>(row)] - int64_t{1}, i});
    }
    sort_refs();
    for (size_t first = 0; first < refs_.size();) {
        const size_t end = run_end(first);
        const int64_t count = static_cast<int64_t>(end - first);
        const int64_t at = refs_[first].record * record_bytes_;
        block_.resize(static_cast<size_t>(count * record_bytes_));
        int64_t got = 0;
        while (got < count * record_bytes_) {
            const ssize_t r = ::pread(fd_, block_.data() + got,
                                      static_cast<size_t>(count * record_bytes_ - got), at + got);
            if (r < 0 && errno == EINTR)
                continue;
            const int64_t row = rows[refs_[first + static_cast<size_t>(got / record_bytes_)].index];
            SR_CHECK(r >= 0, "key_value {}: reading row {} of {} failed: {}", owner_, row, path_,
                     std::strerror(errno));
            if (r == 0) {
                struct stat st {};

                ::fstat(fd_, &st);
                const int64_t from = at + got / record_bytes_ * record_bytes_;
                SR_CHECK(false,
                         "key_value {}: {} is truncated: row {} needs bytes [{}, {}), the file "
                         "has {} (was it changed by something else?)",
                         owner_, path_, row, from, from + record_bytes_,
                         static_cast<int64_t>(st.st_size));
            }
            got += r;
        }
        for (size_t k = first; k < end; ++k) {
            const char* record = block_.data() + static_cast<int64_t>(k - first) * record_bytes_;
            const char* trailer = record + payload_bytes_;
            const int64_t from = refs_[k].record * record_bytes_;
            SR_CHECK(load32(trailer + 4) == kMagic &&
                         load32(trailer) == crc32(record, static_cast<size_t>(payload_bytes_)),
                     "key_value {}: {} is damaged: row {} (bytes [{}, {})) fails its checksum",
                     owner_, path_, rows[refs_[k].index], from, from + record_bytes_);
            std::memcpy(dst + refs_[k].index * payload_bytes_, record,
                        static_cast<size_t>(payload_bytes_));
        }
        first = end;
    }
    account(n * record_bytes_);
}

void KeyValueStore::scan(int64_t chunk,
                         const std::function<void(const std::vector<int64_t>&, const char*)>& fn) {
    std::vector<int64_t> row_of(static_cast<size_t>(stored_count_), -1);
    for (size_t r = 0; r < record_of_.size(); ++r) {
        if (record_of_[r] != 0)
            row_of[record_of_[r] - 1] = static_cast<int64_t>(r);
    }
    std::vector<char> block, payloads;
    std::vector<int64_t> rows;
    for (int64_t first = 0; first < stored_count_; first += chunk) {
        const int64_t n = std::min(chunk, stored_count_ - first);
        block.resize(static_cast<size_t>(n * record_bytes_));
        const int64_t at = first * record_bytes_;
        int64_t got = 0;
        while (got < n * record_bytes_) {
            const ssize_t r = ::pread(fd_, block.data() + got,
                                      static_cast<size_t>(n * record_bytes_ - got), at + got);
            if (r < 0 && errno == EINTR)
                continue;
            SR_CHECK(r > 0, "key_value {}: {} is {}: records [{}, {}) need bytes [{}, {})", owner_,
                     path_, r < 0 ? std::strerror(errno) : "truncated", first, first + n, at,
                     at + n * record_bytes_);
            got += r;
        }
        rows.assign(row_of.begin() + first, row_of.begin() + first + n);
        payloads.resize(static_cast<size_t>(n * payload_bytes_));
        for (int64_t k = 0; k < n; ++k) {
            const char* record = block.data() + k * record_bytes_;
            const char* trailer = record + payload_bytes_;
            SR_CHECK(load32(trailer + 4) == kMagic &&
                         load32(trailer) == crc32(record, static_cast<size_t>(payload_bytes_)),
                     "key_value {}: {} is damaged: row {} (bytes [{}, {})) fails its checksum",
                     owner_, path_, rows[static_cast<size_t>(k)], at + k * record_bytes_,
                     at + (k + 1) * record_bytes_);
            std::memcpy(payloads.data() + k * payload_bytes_, record,
                        static_cast<size_t>(payload_bytes_));
        }
        account(n * record_bytes_);
        fn(rows, payloads.data());
    }
}

void KeyValueStore::write(const int64_t* rows, int64_t n, const char* src) {
    refs_.clear();
    for (int64_t i = 0; i < n; ++i) {
        const int64_t row = rows[i];
        SR_CHECK(row >= 0 && row < rows_, "key_value {}: row {} outside [0, {})", owner_, row,
                 rows_);
        uint32_t& record = record_of_[static_cast<size_t>(row)];
        if (record == 0) {  // appended
            SR_CHECK(stored_count_ < int64_t{UINT32_MAX}, "key_value {}: more than {} rows", owner_,
                     UINT32_MAX);
            record = static_cast<uint32_t>(++stored_count_);
        }
        refs_.push_back({record - int64_t{1}, i});
    }
    sort_refs();
    for (size_t first = 0; first < refs_.size();) {
        const size_t end = run_end(first);
        const int64_t count = static_cast<int64_t>(end - first);
        block_.assign(static_cast<size_t>(count * record_bytes_), 0);
        for (size_t k = first; k < end; ++k) {
            char* record = block_.data() + static_cast<int64_t>(k - first) * record_bytes_;
            std::memcpy(record, src + refs_[k].index * payload_bytes_,
                        static_cast<size_t>(payload_bytes_));
            const uint32_t crc = crc32(record, static_cast<size_t>(payload_bytes_));
            std::memcpy(record + payload_bytes_, &crc, 4);
            std::memcpy(record + payload_bytes_ + 4, &kMagic, 4);
        }
        const int64_t at = refs_[first].record * record_bytes_;
        int64_t put = 0;
        while (put < count * record_bytes_) {
            const ssize_t w = ::pwrite(fd_, block_.data() + put,
                                       static_cast<size_t>(count * record_bytes_ - put), at + put);
            if (w < 0 && errno == EINTR)
                continue;
            SR_CHECK(w > 0, "key_value {}: writing row {} to {} failed: {}", owner_,
                     rows[refs_[first + static_cast<size_t>(put / record_bytes_)].index], path_,
                     w < 0 ? std::strerror(errno) : "no progress");
            put += w;
        }
        first = end;
    }
    unsynced_ = unsynced_ || n > 0;
    account(n * record_bytes_);
}

void KeyValueStore::clear() {
    SR_CHECK(::ftruncate(fd_, 0) == 0, "key_value {}: cannot clear {}: {}", owner_, path_,
             std::strerror(errno));
    std::fill(record_of_.begin(), record_of_.end(), 0);
    stored_count_ = 0;
}

int64_t KeyValueStore::disk_bytes() const {
    struct stat st {};

    return ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_blocks) * 512 : 0;
}

void KeyValueStore::account(int64_t bytes) {
    traffic_ += bytes;
    if (traffic_ < kDropBytes)
        return;
    traffic_ = 0;
    // Dirty pages are only dropped once written: sync them first.
    if (unsynced_) {
        SR_CHECK(::fdatasync(fd_) == 0, "key_value {}: writing {} to disk failed: {}", owner_,
                 path_, std::strerror(errno));
        unsynced_ = false;
    }
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
}

}  // namespace shardrec
