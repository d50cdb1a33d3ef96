// The host-memory tier of a fused_uvm_caching shard (TorchRec's FUSED_UVM_CACHING: the rows and
// their optimizer state in host memory, a cache of them in HBM where the kernels run). The
// payloads sit in one anonymous mapping of rows * payload_bytes, reserved but not committed
// (MAP_NORESERVE): the pages of rows never written are never touched and take no memory, so a
// 100 GB table costs host memory for the rows a run trains, as key_value's file costs disk. No
// huge pages: one written row would commit 2 MiB.
//
// Rows written commit memory that was never allocated, so the system would kill the process
// once it has none left: every kCheckBytes of newly stored rows the store asks what the process
// may still allocate (engine/core/memory_limits.h) and stops the run with an error naming the
// shard, its rows and the limit once less than a margin is left.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/memory_limits.h"
#include "engine/modules/row_store.h"

namespace shardrec {

class HostRowStore final : public RowStore {
public:
    // `owner` names the shard in errors, e.g. "table 'big' rows [0, 100) on rank 1". `available`
    // says what the process may still allocate (tests give their own).
    HostRowStore(std::string owner,
                 int64_t rows,
                 int64_t payload_bytes,
                 std::function<AvailableMemory()> available = available_host_memory);
    ~HostRowStore() override;
    HostRowStore(const HostRowStore&) = delete;
    HostRowStore& operator=(const HostRowStore&) = delete;

    int64_t rows() const override { return rows_; }

    int64_t payload_bytes() const override { return payload_bytes_; }

    bool stored(int64_t row) const override { return stored_[static_cast<size_t>(row)] != 0; }

    std::vector<int64_t> stored_rows() const override;
    void read(const int64_t* rows, int64_t n, char* dst) override;
    void scan(int64_t chunk,
              const std::function<void(const std::vector<int64_t>&, const char*)>& fn) override;
    void write(const int64_t* rows, int64_t n, const char* src) override;
    void clear() override;

    int64_t disk_bytes() const override { return 0; }

    int64_t full_disk_bytes() const override { return 0; }

    int64_t host_bytes() const override { return stored_count_ * payload_bytes_; }

private:
    std::string owner_;
    int64_t rows_ = 0, payload_bytes_ = 0;
    char* data_ = nullptr;
    size_t mapped_ = 0;
    void check_memory();  // every kCheckBytes of new rows

    std::vector<uint8_t> stored_;
    int64_t stored_count_ = 0;
    std::function<AvailableMemory()> available_;
    int64_t checked_at_ = 0;  // stored bytes at the last check
};

}  // namespace shardrec
