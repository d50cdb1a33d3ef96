// `shardrec data criteo-preprocess`: Criteo TSV files (one per day) to binary shards plus a
// manifest (criteo_shard.h), streaming with bounded memory, parsed by worker threads and written
// in input order, so the output does not depend on the thread count.
//   - Memory: the reader holds one chunk (at most chunk_lines lines and about chunk_bytes bytes)
//     and at most `threads` more are being parsed; nothing else grows with the input.
//   - Shards: input file i, lines [j * lines_per_shard, (j + 1) * lines_per_shard) become
//     shard_<i>_<j>.bin, written under a .tmp name and renamed when complete.
//   - Resume: a rerun keeps the complete shards whose header matches (same options, same input
//     name and size) and continues each input after its last complete shard; stale .tmp files
//     are removed. A shard written by other options is an error (choose a fresh --out).
//   - Bad lines stop with "FILE:LINE: field ... " unless skip_bad_lines, which counts them (per
//     shard and in the manifest) and logs the first few.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/criteo_record.h"

namespace shardrec::data {

// Longer lines are errors (a file without newlines must not be read into memory whole).
constexpr int64_t kCriteoMaxLineBytes = 1 << 20;

struct CriteoPreprocessOptions {
    std::vector<std::string> inputs;  // TSV files, in day order
    std::string out_dir;
    CriteoRecordLayout layout;
    int64_t lines_per_shard = 1 << 20;
    int64_t chunk_lines = 1 << 14;  // lines per parse task
    int64_t chunk_bytes = 4 << 20;  // text bytes per parse task (a chunk ends past this)
    int threads = 1;                // parse tasks in flight
    bool skip_bad_lines = false;
    // What a bad line's error suggests (the command's own way out).
    std::string bad_line_hint = "--skip-bad-lines skips and counts such lines";
    bool show_progress = false;  // a bar on a terminal, else a line per 10%, on stderr
};

struct CriteoPreprocessSummary {
    int64_t rows = 0;           // records in the output
    int64_t skipped_lines = 0;  // bad lines skipped (skip_bad_lines)
    int64_t shards_written = 0;
    int64_t shards_reused = 0;        // complete shards kept from an interrupted run
    int64_t bytes_read = 0;           // input bytes parsed by this run
    int64_t peak_buffered_bytes = 0;  // most chunk memory (text + records) held at once
};

// The bound peak_buffered_bytes stays under: (threads + 1) chunks of text and records.
int64_t criteo_preprocess_buffer_bound(const CriteoPreprocessOptions& options);

CriteoPreprocessSummary preprocess_criteo(const CriteoPreprocessOptions& options);

// The shard name of input i, shard j: "shard_0003_00012.bin".
std::string criteo_shard_name(size_t input, int64_t shard);

}  // namespace shardrec::data
