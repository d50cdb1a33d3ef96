// The disk tier of a key_value table shard (TorchRec's KEY_VALUE / SSD kernel): one file of
// fixed-size records, each a row's payload (its weights, then its optimizer state) followed by the
// payload's CRC-32 and a magic word. A row's record is appended the first time the row is
// written and rewritten in place after that; an index in memory (4 bytes a row) gives each
// stored row's record. A row never written has no record and costs no disk: its value is the
// table's initial value, computed by the caller.
//
// Why an appended file with an index, not the row id as the address: a sparse file addressed by
// row would cost a file-system block (4 KiB) for each lone row, several times the record of a
// 128-wide row, and the ids of recommendation data reach millions of rows once each; a key-value
// database would add a dependency and its own memory. The index is rebuilt from nothing at each
// start: the file is scratch, checkpoints hold the rows.
//
// A read or write takes its rows in record order and moves each run of consecutive records (the
// rows a step appends are consecutive) in one pread/pwrite of up to 1 MiB.
//
// Memory stays bounded: reads and writes go through pread/pwrite, and the file's pages are
// dropped from the page cache (posix_fadvise DONTNEED, after fdatasync for written ones) every
// kDropBytes of traffic, so a 100 GB table does not fill RAM with cached pages.
//
// Faults name the table, the file and the rank: a file that cannot be created, a full disk, a
// truncated file, a record whose checksum fails.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/modules/row_store.h"

namespace shardrec {

class KeyValueStore final : public RowStore {
public:
    // Creates `path` (replacing a file there) for up to `rows` records of `payload_bytes` each.
    // `owner` names the shard in errors, e.g. "table 'big' rows [0, 100) on rank 1".
    KeyValueStore(std::string path, std::string owner, int64_t rows, int64_t payload_bytes);
    ~KeyValueStore() override;
    KeyValueStore(const KeyValueStore&) = delete;
    KeyValueStore& operator=(const KeyValueStore&) = delete;

    int64_t rows() const override { return rows_; }

    int64_t payload_bytes() const override { return payload_bytes_; }

    int64_t record_bytes() const { return record_bytes_; }

    const std::string& path() const { return path_; }

    bool stored(int64_t row) const override { return record_of_[static_cast<size_t>(row)] != 0; }

    int64_t stored_count() const { return stored_count_; }

    // The stored rows, ascending.
    std::vector<int64_t> stored_rows() const override;

    // Payloads of n stored rows into dst (n * payload_bytes), checked against their checksums.
    void read(const int64_t* rows, int64_t n, char* dst) override;
    // Every stored row in the file's order, `chunk` records a read (sequential I/O): calls
    // fn(rows, payloads) with up to `chunk` rows and their payloads (rows.size() * payload_bytes).
    void scan(int64_t chunk,
              const std::function<void(const std::vector<int64_t>&, const char*)>& fn) override;
    // n payloads from src (n * payload_bytes) to their rows, which become stored.
    void write(const int64_t* rows, int64_t n, const char* src) override;
    // Every row unstored; the file emptied.
    void clear() override;

    // Bytes the file occupies on disk (its allocated blocks).
    int64_t disk_bytes() const override;

    int64_t full_disk_bytes() const override { return rows_ * record_bytes_; }

    // The index in memory, 4 bytes a row.
    int64_t host_bytes() const override { return rows_ * 4; }

private:
    struct Ref {
        int64_t record;  // 0-based
        int64_t index;   // in the caller's rows and buffers
    };

    void account(int64_t bytes);  // drops the file's pages every kDropBytes
    void sort_refs();
    size_t run_end(size_t first) const;  // refs_ [first, end): consecutive records, one call

    std::string path_, owner_;
    int fd_ = -1;
    int64_t rows_ = 0, payload_bytes_ = 0, record_bytes_ = 0;
    std::vector<uint32_t> record_of_;  // per row: 1 + its record's index, 0 when not stored
    int64_t stored_count_ = 0;
    int64_t traffic_ = 0;  // bytes since the pages were last dropped
    bool unsynced_ = false;
    std::vector<Ref> refs_;    // a read's or write's rows in record order
    std::vector<char> block_;  // a run of records' staging
};

}  // namespace shardrec
