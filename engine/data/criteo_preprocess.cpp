#include "engine/data/criteo_preprocess.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <set>

#include "engine/core/crc32.h"
#include "engine/core/durable_file.h"
#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/core/log.h"
#include "engine/core/rng.h"
#include "engine/data/criteo_shard.h"

namespace shardrec::data {
namespace fs = std::filesystem;

namespace {

constexpr int kMaxLoggedBadLines = 10;

// ---- reading: lines into chunks ----

// Lines of one input file from a byte offset, each appended to a chunk's text with its '\n'.
class LineReader {
public:
    LineReader(const std::string& path, uint64_t offset) : path_(path), offset_(offset) {
        file_ = std::fopen(path.c_str(), "rb");
        SR_CHECK(file_ != nullptr, "{}: cannot open for reading", path);
        SR_CHECK(std::fseek(file_, static_cast<long>(offset), SEEK_SET) == 0, "{}: cannot seek",
                 path);
        buffer_.resize(1 << 20);
    }

    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;

    ~LineReader() { std::fclose(file_); }

    // Appends the next line and '\n' to text; false at the end of the file.
    bool next_line(std::string& text) {
        const size_t start = text.size();
        while (true) {
            if (pos_ == end_ && !refill()) {
                if (text.size() == start) {
                    return false;
                }
                offset_ += text.size() - start;  // a last line without '\n'
                text += '\n';
                return true;
            }
            const char* begin = buffer_.data() + pos_;
            const auto* nl = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
            const size_t n = nl ? static_cast<size_t>(nl - begin) : end_ - pos_;
            text.append(begin, n);
            pos_ += n;
            SR_CHECK(static_cast<int64_t>(text.size() - start) <= kCriteoMaxLineBytes,
                     "{}: a line longer than {} bytes after byte offset {} (not a Criteo TSV?)",
                     path_, kCriteoMaxLineBytes, offset_);
            if (nl) {
                ++pos_;
                offset_ += text.size() - start + 1;
                text += '\n';
                return true;
            }
        }
    }

    uint64_t offset() const { return offset_; }  // of the next line

private:
    bool refill() {
        end_ = std::fread(buffer_.data(), 1, buffer_.size(), file_);
        pos_ = 0;
        SR_CHECK(end_ > 0 || !std::ferror(file_), "{}: read error", path_);
        return end_ > 0;
    }

    std::string path_;
    std::FILE* file_ = nullptr;
    std::vector<char> buffer_;
    size_t pos_ = 0;
    size_t end_ = 0;
    uint64_t offset_;
};

struct Chunk {
    std::string text;        // lines, each ending in '\n'
    int64_t first_line = 0;  // 1-based number of the first line in its file
    int64_t lines = 0;
    uint64_t end_offset = 0;  // input offset after the last line
    int64_t end_line = 0;     // lines of the file consumed after this chunk
    bool ends_shard = false;  // the shard is complete after this chunk
};

struct ParsedChunk {
    std::vector<uint8_t> records;
    int64_t rows = 0;
    std::vector<std::string> bad_lines;  // "FILE:LINE: message", in line order
    int64_t text_bytes = 0;
};

ParsedChunk parse_chunk(const Chunk& chunk,
                        const CriteoRecordLayout& layout,
                        const std::string& name) {
    ParsedChunk out;
    out.text_bytes = static_cast<int64_t>(chunk.text.size());
    const auto record_bytes = static_cast<size_t>(layout.record_bytes());
    out.records.resize(static_cast<size_t>(chunk.lines) * record_bytes);
    CriteoLine line;
    size_t start = 0;
    for (int64_t i = 0; i < chunk.lines; ++i) {
        const size_t nl = chunk.text.find('\n', start);
        const std::string_view text(chunk.text.data() + start, nl - start);
        start = nl + 1;
        const std::string error = parse_criteo_line(text, line);
        if (!error.empty()) {
            out.bad_lines.push_back(fmt::format("{}:{}: {}", name, chunk.first_line + i, error));
            continue;
        }
        encode_criteo_record(line, layout, out.records.data() + out.rows * record_bytes);
        ++out.rows;
    }
    out.records.resize(static_cast<size_t>(out.rows) * record_bytes);
    return out;
}

// ---- writing: one shard under a temporary name ----

class ShardWriter {
public:
    ShardWriter(const fs::path& path, uint32_t record_bytes)
        : path_(path), tmp_(path.string() + ".tmp"), record_bytes_(record_bytes) {
        file_ = std::fopen(tmp_.c_str(), "wb");
        SR_CHECK(file_ != nullptr, "{}: cannot create", tmp_.string());
        const uint8_t zeros[kShardHeaderBytes] = {};
        write(zeros, sizeof(zeros));
    }

    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;

    ~ShardWriter() {  // not finished: nothing partial stays behind
        if (file_ != nullptr) {
            std::fclose(file_);
            std::error_code ec;
            fs::remove(tmp_, ec);
        }
    }

    void append(const ParsedChunk& chunk) {
        write(chunk.records.data(), chunk.records.size());
        crc_ = crc32(chunk.records.data(), chunk.records.size(), crc_);
        rows_ += static_cast<uint64_t>(chunk.rows);
        skipped_ += chunk.bad_lines.size();
    }

    // Writes the header, syncs and renames to the final name; returns the header.
    ShardHeader finish(uint64_t end_offset, uint64_t end_line, uint64_t fingerprint) {
        ShardHeader h;
        h.record_bytes = record_bytes_;
        h.rows = rows_;
        h.input_end_offset = end_offset;
        h.input_end_line = end_line;
        h.skipped_lines = skipped_;
        h.fingerprint = fingerprint;
        h.payload_crc32 = crc_;
        uint8_t header[kShardHeaderBytes];
        encode_shard_header(h, header);
        SR_CHECK(std::fseek(file_, 0, SEEK_SET) == 0, "{}: cannot seek", tmp_.string());
        write(header, sizeof(header));
        const bool ok = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
        const bool closed = std::fclose(file_) == 0;
        file_ = nullptr;
        SR_CHECK(ok && closed, "{}: cannot write (disk full?)", tmp_.string());
        fs::rename(tmp_, path_);
        return h;
    }

private:
    void write(const void* data, size_t n) {
        SR_CHECK(n == 0 || std::fwrite(data, 1, n, file_) == n, "{}: cannot write (disk full?)",
                 tmp_.string());
    }

    fs::path path_;
    fs::path tmp_;
    uint32_t record_bytes_;
    std::FILE* file_ = nullptr;
    uint32_t crc_ = 0;
    uint64_t rows_ = 0;
    uint64_t skipped_ = 0;
};

// ---- progress: bytes of input ----

class ByteProgress {
public:
    ByteProgress(int64_t total_bytes, bool enabled)
        : total_(std::max<int64_t>(total_bytes, 1)),
          enabled_(enabled),
          tty_(isatty(STDERR_FILENO)) {}

    void update(int64_t done_bytes, int64_t rows) {
        if (!enabled_) {
            return;
        }
        const double frac = std::min(1.0, static_cast<double>(done_bytes) / total_);
        const auto now = std::chrono::steady_clock::now();
        const double elapsed = std::chrono::duration<double>(now - t0_).count();
        const bool gb = total_ >= 1e9;
        const double unit = gb ? 1e9 : 1e6;
        const std::string text = fmt::format(
            "{:3.0f}% [{:<30}] {:.2f}/{:.2f} {}  {:.1f} MB/s  {} rows", 100 * frac,
            std::string(static_cast<size_t>(30 * frac), '#'), done_bytes / unit, total_ / unit,
            gb ? "GB" : "MB", done_bytes / 1e6 / std::max(elapsed, 1e-9), rows);
        if (tty_) {
            if (now - last_ >= std::chrono::milliseconds(100) || frac >= 1.0) {
                std::fprintf(stderr, "\r%s\033[K", text.c_str());
                std::fflush(stderr);
                last_ = now;
                drawn_ = true;
            }
        } else if (static_cast<int>(10 * frac) > last_decile_) {
            last_decile_ = static_cast<int>(10 * frac);
            log::root().info("criteo-preprocess {}", text);
        }
    }

    ~ByteProgress() {
        if (drawn_) {
            std::fputc('\n', stderr);
        }
    }

private:
    double total_;
    bool enabled_;
    bool tty_;
    bool drawn_ = false;
    int last_decile_ = 0;
    std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_{};
};

// ---- one run ----

// Keys a shard to the options and the input (its name and size), so that a rerun with other
// options or inputs never mixes its shards with these.
uint64_t input_fingerprint(const CriteoPreprocessOptions& o,
                           const std::string& path,
                           uint64_t size) {
    const CriteoRecordLayout& l = o.layout;
    uint64_t h =
        rng::hash(kShardVersion, static_cast<uint64_t>(o.lines_per_shard), l.multi_hot_seed);
    for (size_t t = 0; t < l.num_embeddings.size(); ++t) {
        h = rng::hash(h, static_cast<uint64_t>(l.num_embeddings[t]),
                      static_cast<uint64_t>(l.multi_hot[t]));
    }
    if (l.any_raw()) {  // only then: the fingerprints of shards without raw ids stay as they were
        for (int t = 0; t < kCriteoNumSparse; ++t) {
            h = rng::hash(h, static_cast<uint64_t>(l.raw(t)));
        }
    }
    for (const char c : fs::path(path).filename().string()) {
        h = rng::hash(h, static_cast<unsigned char>(c));
    }
    return rng::hash(h, size);
}

class PreprocessRun {
public:
    explicit PreprocessRun(const CriteoPreprocessOptions& o)
        : o_(o), record_bytes_(static_cast<uint32_t>(o.layout.record_bytes())) {
        for (const auto& path : o.inputs) {
            check_input_file(path, "the input file (--in)");
            // A day is fingerprinted by its size and a stopped run resumes within it.
            SR_CHECK(fs::is_regular_file(path),
                     "the input file (--in) '{}' is a pipe or another stream: criteo-preprocess "
                     "reads regular files (their size fingerprints the run, which resumes within "
                     "them); write it to a file first",
                     path);
            std::error_code ec;
            const auto size = fs::file_size(path, ec);
            SR_CHECK(!ec, "{}: cannot read: {}", path, ec.message());
            sizes_.push_back(static_cast<int64_t>(size));
            total_bytes_ += static_cast<int64_t>(size);
        }
    }

    CriteoManifest run() {
        ByteProgress progress(total_bytes_, o_.show_progress);
        progress_ = &progress;
        CriteoManifest m;
        m.layout = o_.layout;
        m.lines_per_shard = o_.lines_per_shard;
        for (size_t i = 0; i < o_.inputs.size(); ++i) {
            m.inputs.push_back(process_input(i));
            done_bytes_ += sizes_[i];
            // An empty day (a download cut short?) is kept, as a day, but said.
            if (m.inputs.back().rows == 0)
                log::root().warn("{}: no rows{}", o_.inputs[i],
                                 sizes_[i] == 0 ? " (an empty file)" : " (every line skipped)");
        }
        progress_ = nullptr;
        return m;
    }

    CriteoPreprocessSummary summary;

private:
    // The complete shards of input i, in order from shard 0; stops at the first missing or
    // damaged one (a rerun writes it again). Only headers and sizes are read here.
    std::vector<ShardHeader> completed_shards(size_t i, uint64_t fingerprint) const {
        std::vector<ShardHeader> out;
        for (int64_t j = 0;; ++j) {
            const fs::path path = fs::path(o_.out_dir) / criteo_shard_name(i, j);
            std::FILE* f = std::fopen(path.c_str(), "rb");
            if (f == nullptr) {
                break;
            }
            uint8_t header[kShardHeaderBytes] = {};
            const size_t got = std::fread(header, 1, sizeof(header), f);
            std::fclose(f);
            ShardHeader h;
            try {
                h = parse_shard_header(header, got, path.string());
            } catch (const Error&) {
                break;
            }
            SR_CHECK(h.fingerprint == fingerprint && h.record_bytes == record_bytes_,
                     "{} was written for other options or another input than {}: remove {} or "
                     "choose another --out",
                     path.string(), o_.inputs[i], o_.out_dir);
            std::error_code ec;
            const auto size = fs::file_size(path, ec);
            if (ec || size != kShardHeaderBytes + h.rows * h.record_bytes) {
                break;
            }
            out.push_back(h);
        }
        return out;
    }

    CriteoInputInfo process_input(size_t i);

    const CriteoPreprocessOptions& o_;
    uint32_t record_bytes_;
    std::vector<int64_t> sizes_;
    int64_t total_bytes_ = 0;
    int64_t done_bytes_ = 0;  // of the inputs before the current one
    int64_t logged_bad_lines_ = 0;
    ByteProgress* progress_ = nullptr;
};

CriteoInputInfo PreprocessRun::process_input(size_t i) {
    const std::string& path = o_.inputs[i];
    const auto size = static_cast<uint64_t>(sizes_[i]);
    const uint64_t fingerprint = input_fingerprint(o_, path, size);
    CriteoInputInfo info;
    info.path = path;
    info.bytes = sizes_[i];
    auto add_shard = [&](int64_t j, const ShardHeader& h) {
        info.shards.push_back(
            {criteo_shard_name(i, j), static_cast<int64_t>(h.rows), fingerprint, h.payload_crc32});
        info.rows += static_cast<int64_t>(h.rows);
        info.skipped_lines += static_cast<int64_t>(h.skipped_lines);
        info.lines = static_cast<int64_t>(h.input_end_line);
    };
    const std::vector<ShardHeader> kept = completed_shards(i, fingerprint);
    for (size_t j = 0; j < kept.size(); ++j) {
        add_shard(static_cast<int64_t>(j), kept[j]);
    }
    summary.shards_reused += static_cast<int64_t>(kept.size());
    const uint64_t start = kept.empty() ? 0 : kept.back().input_end_offset;
    if (start == size) {
        return info;
    }
    LineReader reader(path, start);
    int64_t line_no = info.lines;
    int64_t lines_in_shard = 0;
    auto j = static_cast<int64_t>(kept.size());
    std::unique_ptr<ShardWriter> writer;
    std::deque<std::pair<Chunk, std::future<ParsedChunk>>> in_flight;  // chunks keep no text
    int64_t buffered = 0;
    auto write_oldest = [&] {
        auto [meta, future] = std::move(in_flight.front());
        in_flight.pop_front();
        const ParsedChunk parsed = future.get();
        buffered -= parsed.text_bytes + meta.lines * record_bytes_;
        if (!parsed.bad_lines.empty()) {
            SR_CHECK(o_.skip_bad_lines, "{} ({})", parsed.bad_lines.front(), o_.bad_line_hint);
            for (const auto& bad : parsed.bad_lines) {
                if (logged_bad_lines_++ < kMaxLoggedBadLines) {
                    log::root().warn("skipping {}", bad);
                }
            }
            summary.skipped_lines += static_cast<int64_t>(parsed.bad_lines.size());
        }
        if (!writer) {
            writer = std::make_unique<ShardWriter>(fs::path(o_.out_dir) / criteo_shard_name(i, j),
                                                   record_bytes_);
        }
        writer->append(parsed);
        summary.rows += parsed.rows;
        if (meta.ends_shard) {
            add_shard(j, writer->finish(meta.end_offset, static_cast<uint64_t>(meta.end_line),
                                        fingerprint));
            writer.reset();
            ++j;
            ++summary.shards_written;
        }
        progress_->update(done_bytes_ + static_cast<int64_t>(meta.end_offset), summary.rows);
    };
    for (bool eof = false; !eof;) {
        Chunk chunk;
        chunk.first_line = line_no + 1;
        while (chunk.lines < o_.chunk_lines &&
               static_cast<int64_t>(chunk.text.size()) < o_.chunk_bytes &&
               lines_in_shard < o_.lines_per_shard) {
            if (!reader.next_line(chunk.text)) {
                eof = true;
                break;
            }
            ++chunk.lines;
            ++lines_in_shard;
            ++line_no;
        }
        chunk.end_offset = reader.offset();
        chunk.end_line = line_no;
        chunk.ends_shard = lines_in_shard == o_.lines_per_shard || (eof && lines_in_shard > 0);
        if (chunk.ends_shard) {
            lines_in_shard = 0;
        }
        if (chunk.lines == 0 && !chunk.ends_shard) {
            continue;
        }
        const int64_t bytes = static_cast<int64_t>(chunk.text.size()) + chunk.lines * record_bytes_;
        buffered += bytes;
        summary.peak_buffered_bytes = std::max(summary.peak_buffered_bytes, buffered);
        summary.bytes_read += static_cast<int64_t>(chunk.text.size());
        Chunk meta;  // the chunk without its text, for the writer
        meta.lines = chunk.lines;
        meta.end_offset = chunk.end_offset;
        meta.end_line = chunk.end_line;
        meta.ends_shard = chunk.ends_shard;
        const std::string name = path;
        auto task = [this, c = std::move(chunk), name] { return parse_chunk(c, o_.layout, name); };
        in_flight.emplace_back(std::move(meta), std::async(std::launch::async, std::move(task)));
        while (static_cast<int>(in_flight.size()) >= std::max(1, o_.threads)) {
            write_oldest();
        }
    }
    while (!in_flight.empty()) {
        write_oldest();
    }
    SR_CHECK(writer == nullptr, "{}: internal error: a shard was left open", path);
    return info;
}

// Removes the temporary files an interrupted run left behind.
void remove_stale_temporaries(const std::string& dir) {
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
            (name.rfind("shard_", 0) == 0 || name.rfind(kCriteoManifestName, 0) == 0)) {
            fs::remove(entry.path());
        }
    }
}

// Shards of an earlier run into the directory that the new manifest does not list (that run had
// more inputs): removed once the manifest that supersedes them is written.
void remove_unlisted_shards(const std::string& dir, const CriteoManifest& m) {
    std::set<std::string> listed;
    for (const CriteoInputInfo& input : m.inputs) {
        for (const CriteoShardInfo& shard : input.shards)
            listed.insert(shard.file);
    }
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("shard_", 0) == 0 && name.size() > 4 &&
            name.compare(name.size() - 4, 4, ".bin") == 0 && listed.count(name) == 0) {
            fs::remove(entry.path());
        }
    }
}

}  // namespace

std::string criteo_shard_name(size_t input, int64_t shard) {
    return fmt::format("shard_{:04d}_{:05d}.bin", input, shard);
}

int64_t criteo_preprocess_buffer_bound(const CriteoPreprocessOptions& o) {
    const int64_t chunk =
        o.chunk_bytes + kCriteoMaxLineBytes + 1 + o.chunk_lines * o.layout.record_bytes();
    return (std::max(1, o.threads) + 1) * chunk;
}

CriteoPreprocessSummary preprocess_criteo(const CriteoPreprocessOptions& o) {
    o.layout.validate();
    SR_CHECK(!o.inputs.empty(), "criteo-preprocess: no input files");
    SR_CHECK(o.lines_per_shard >= 1 && o.chunk_lines >= 1 && o.chunk_bytes >= 1 && o.threads >= 1,
             "criteo-preprocess: lines_per_shard, chunk_lines, chunk_bytes and threads must be "
             ">= 1");
    std::error_code ec;
    const bool existed = fs::exists(o.out_dir, ec);
    fs::create_directories(o.out_dir);
    remove_stale_temporaries(o.out_dir);
    CriteoManifest manifest;
    CriteoPreprocessSummary s;
    try {
        PreprocessRun run(o);
        manifest = run.run();
        s = run.summary;
    } catch (...) {  // complete shards stay for a rerun; a directory left empty goes
        if (!existed && fs::is_empty(o.out_dir, ec))
            fs::remove(o.out_dir, ec);
        throw;
    }
    write_file_atomically((fs::path(o.out_dir) / kCriteoManifestName).string(),
                          criteo_manifest_json(manifest));
    remove_unlisted_shards(o.out_dir, manifest);
    s.rows = manifest.total_rows();
    s.skipped_lines = 0;
    for (const auto& input : manifest.inputs) {
        s.skipped_lines += input.skipped_lines;
    }
    return s;
}

}  // namespace shardrec::data
