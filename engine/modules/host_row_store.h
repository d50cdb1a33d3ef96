// The host-memory tier of a fused_uvm_caching shard (TorchRec's FUSED_UVM_CACHING: the rows and
// their optimizer state in host memory, a cache of them in HBM where the kernels run). The
// payloads sit in one anonymous mapping of rows * payload_bytes, reserved but not committed
// (MAP_NORESERVE): the pages of rows never written are never touched and take no memory, so a
// 100 GB table costs host memory for the rows a run trains, as key_value's file costs disk. No
// huge pages: one written row would commit 2 MiB.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/modules/row_store.h"

namespace shardrec {

class HostRowStore final : public RowStore {
public:
    // `owner` names the shard in errors, e.g. "table 'big' rows [0, 100) on rank 1".
    HostRowStore(std::string owner, int64_t rows, int64_t payload_bytes);
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
    std::vector<uint8_t> stored_;
    int64_t stored_count_ = 0;
};

}  // namespace shardrec
