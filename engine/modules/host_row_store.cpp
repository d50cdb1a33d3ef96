#include "engine/modules/host_row_store.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace shardrec {

namespace {

constexpr int64_t kCheckBytes = int64_t{256} << 20;  // new rows between memory checks
constexpr int64_t kMarginBytes = int64_t{1} << 30;   // what must stay free after a check

}  // namespace

HostRowStore::HostRowStore(std::string owner,
                           int64_t rows,
                           int64_t payload_bytes,
                           std::function<AvailableMemory()> available)
    : owner_(std::move(owner)),
      rows_(rows),
      payload_bytes_(payload_bytes),
      available_(std::move(available)) {
    SR_CHECK(rows >= 0 && payload_bytes > 0, "{}: {} rows of {} bytes", owner_, rows,
             payload_bytes);
    mapped_ = static_cast<size_t>(std::max<int64_t>(rows * payload_bytes, 1));
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    SR_CHECK(p != MAP_FAILED,
             "{}: cannot reserve {:.2f} GiB of host memory for its rows and optimizer state: {}",
             owner_, static_cast<double>(mapped_) / 1073741824.0, std::strerror(errno));
    data_ = static_cast<char*>(p);
    stored_.assign(static_cast<size_t>(rows), 0);
}

HostRowStore::~HostRowStore() {
    if (data_ != nullptr)
        ::munmap(data_, mapped_);
}

std::vector<int64_t> HostRowStore::stored_rows() const {
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(stored_count_));
    for (int64_t r = 0; r < rows_; ++r) {
        if (stored_[static_cast<size_t>(r)])
            out.push_back(r);
    }
    return out;
}

void HostRowStore::read(const int64_t* rows, int64_t n, char* dst) {
    const auto pb = static_cast<size_t>(payload_bytes_);
    for (int64_t i = 0; i < n; ++i) {
        SR_CHECK(rows[i] >= 0 && rows[i] < rows_ && stored(rows[i]), "{}: row {} is not stored",
                 owner_, rows[i]);
        std::memcpy(dst + static_cast<size_t>(i) * pb, data_ + static_cast<size_t>(rows[i]) * pb,
                    pb);
    }
}

void HostRowStore::scan(int64_t chunk,
                        const std::function<void(const std::vector<int64_t>&, const char*)>& fn) {
    std::vector<int64_t> rows;
    std::vector<char> buf;
    const std::vector<int64_t> all = stored_rows();
    for (size_t i = 0; i < all.size(); i += static_cast<size_t>(chunk)) {
        rows.assign(all.begin() + static_cast<std::ptrdiff_t>(i),
                    all.begin() + static_cast<std::ptrdiff_t>(
                                      std::min(all.size(), i + static_cast<size_t>(chunk))));
        buf.resize(rows.size() * static_cast<size_t>(payload_bytes_));
        read(rows.data(), static_cast<int64_t>(rows.size()), buf.data());
        fn(rows, buf.data());
    }
}

void HostRowStore::write(const int64_t* rows, int64_t n, const char* src) {
    const auto pb = static_cast<size_t>(payload_bytes_);
    for (int64_t i = 0; i < n; ++i) {
        SR_CHECK(rows[i] >= 0 && rows[i] < rows_, "{}: row {} is outside [0, {})", owner_, rows[i],
                 rows_);
        std::memcpy(data_ + static_cast<size_t>(rows[i]) * pb, src + static_cast<size_t>(i) * pb,
                    pb);
        uint8_t& s = stored_[static_cast<size_t>(rows[i])];
        stored_count_ += s == 0 ? 1 : 0;
        s = 1;
    }
    if (host_bytes() - checked_at_ >= kCheckBytes)
        check_memory();
}

void HostRowStore::check_memory() {
    checked_at_ = host_bytes();
    const AvailableMemory left = available_();
    SR_CHECK(left.bytes < 0 || left.bytes >= kMarginBytes,
             "{}: its rows in host memory have grown to {} ({} rows written) and this process "
             "may allocate only {} more ({}): the run stops here, before the system kills it; "
             "the checkpoints written so far stay. Spread the tables over more ranks, or keep "
             "fewer rows on this one",
             owner_, format_bytes(static_cast<double>(host_bytes())), stored_count_,
             format_bytes(static_cast<double>(left.bytes)), left.bound_by);
}

void HostRowStore::clear() {
    ::madvise(data_, mapped_, MADV_DONTNEED);  // the pages go back: zeros when next touched
    std::fill(stored_.begin(), stored_.end(), 0);
    stored_count_ = 0;
    checked_at_ = 0;
}

}  // namespace shardrec
