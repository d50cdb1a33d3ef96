// The slower tier behind a cached table shard (engine/modules/cached_embedding_shard.h): the
// shard's rows as fixed-size payloads (a row's weights, then its optimizer state), addressed by
// the row's number in the shard. A row never written is not stored, and is at the table's initial
// value, which the caller computes. Two tiers:
//   KeyValueStore  a file on local disk (key_value, the CPU's tier; key_value_store.h)
//   HostRowStore   host memory (fused_uvm_caching, a GPU's rows behind its HBM cache)
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace shardrec {

class RowStore {
public:
    virtual ~RowStore() = default;

    virtual int64_t rows() const = 0;
    virtual int64_t payload_bytes() const = 0;
    virtual bool stored(int64_t row) const = 0;
    // The stored rows, ascending.
    virtual std::vector<int64_t> stored_rows() const = 0;
    // Payloads of n stored rows into dst (n * payload_bytes).
    virtual void read(const int64_t* rows, int64_t n, char* dst) = 0;
    // Every stored row, `chunk` at a time, in the tier's cheapest order: fn(rows, payloads).
    virtual void scan(int64_t chunk,
                      const std::function<void(const std::vector<int64_t>&, const char*)>& fn) = 0;
    // n payloads from src to their rows, which become stored.
    virtual void write(const int64_t* rows, int64_t n, const char* src) = 0;
    // Every row unstored.
    virtual void clear() = 0;

    // Disk the rows take now, and once every row is written (0 for host memory).
    virtual int64_t disk_bytes() const = 0;
    virtual int64_t full_disk_bytes() const = 0;
    // Host memory the stored rows take.
    virtual int64_t host_bytes() const = 0;
};

}  // namespace shardrec
