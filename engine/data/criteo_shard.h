// Binary Criteo shards and their manifest. A shard is a 64-byte header followed by `rows`
// fixed-size records (criteo_record.h); it is written under a temporary name and renamed when
// complete, so a shard file that exists is whole. The header lets a rerun resume (where its input
// ended) and a loader verify it (sizes, checksum, which preprocessing wrote it):
//   0  magic "SRCRITEO"            32 input_end_line u64 (lines of the input consumed)
//   8  version u32, record_bytes u32  40 skipped_lines u64 (bad lines skipped in this shard)
//   16 rows u64                    48 fingerprint u64 (options and input identity)
//   24 input_end_offset u64        56 payload_crc32 u32, header_crc32 u32 (of bytes 0-59)
// parse_shard_header and check_shard are pure functions of bytes, for fuzzing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/criteo_record.h"

namespace shardrec::data {

constexpr size_t kShardHeaderBytes = 64;
constexpr uint32_t kShardVersion = 1;
// The manifest of a layout with raw-id features (its records hold i64 ids): a build that reads
// only version 1 refuses it instead of reading those ids as i32. Without raw ids the manifest
// stays version 1, byte for byte. The shard header is the same in both.
constexpr uint32_t kManifestVersionRawIds = 2;

struct ShardHeader {
    uint32_t record_bytes = 0;
    uint64_t rows = 0;
    uint64_t input_end_offset = 0;
    uint64_t input_end_line = 0;
    uint64_t skipped_lines = 0;
    uint64_t fingerprint = 0;
    uint32_t payload_crc32 = 0;
};

void encode_shard_header(const ShardHeader& header, uint8_t out[kShardHeaderBytes]);

// Checks magic, version and the header checksum. Throws an Error naming `name` otherwise.
ShardHeader parse_shard_header(const uint8_t* data, size_t size, const std::string& name);

// Checks a whole shard image: the header, record_bytes == expected_record_bytes, the size
// (64 + rows * record_bytes: a truncated or extended shard fails) and, if verify_payload, the
// payload checksum and every record's label. Throws an Error naming `name` and the mismatch.
ShardHeader check_shard(const uint8_t* data,
                        size_t size,
                        const std::string& name,
                        uint32_t expected_record_bytes,
                        bool verify_payload);

// Every record's label is 0 or 1; otherwise throws an Error naming `name`, the record index (from
// 0 in this shard) and the value. `size` is a checked shard's (64 + rows * record_bytes).
void check_shard_labels(const uint8_t* data,
                        size_t size,
                        const std::string& name,
                        uint32_t record_bytes);

// ---- manifest ----

struct CriteoShardInfo {
    std::string file;  // relative to the data directory
    int64_t rows = 0;
    uint64_t fingerprint = 0;
    uint32_t crc32 = 0;
};

struct CriteoInputInfo {
    std::string path;  // the input file as given
    int64_t bytes = 0;
    int64_t lines = 0;
    int64_t rows = 0;
    int64_t skipped_lines = 0;
    std::vector<CriteoShardInfo> shards;
};

// <dir>/manifest.json: the record layout, table sizes, and every shard with rows and checksums,
// per input file (day) in input order. Rows are numbered in that order across all shards. With
// raw-id features it is version 2 and every feature has "raw_ids": true or false.
struct CriteoManifest {
    CriteoRecordLayout layout;
    int64_t lines_per_shard = 0;
    std::vector<CriteoInputInfo> inputs;

    int64_t total_rows() const;
};

constexpr const char* kCriteoManifestName = "manifest.json";

std::string criteo_manifest_json(const CriteoManifest& manifest);
// Parses manifest JSON text; `name` is used in errors. Throws on anything missing or malformed.
CriteoManifest parse_criteo_manifest(const std::string& text, const std::string& name);
// Reads <dir>/manifest.json.
CriteoManifest read_criteo_manifest(const std::string& dir);

}  // namespace shardrec::data
