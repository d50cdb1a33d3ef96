// Criteo preprocessing on small generated TSV files (the real format) and the binary loader:
// records equal an independent computation from what the generator wrote, the output does not
// depend on the thread count, a resumed run writes the same bytes, the buffered memory is bounded
// by the chunk size, bad lines stop (naming FILE:LINE and the field) or are skipped and counted,
// and the loader serves the same samples to any rank slicing and refuses damaged shards.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/core/crc32.h"
#include "engine/core/error.h"
#include "engine/data/batch_prefetcher.h"
#include "engine/data/criteo_binary_dataset.h"
#include "engine/data/criteo_preprocess.h"
#include "engine/data/criteo_shard.h"
#include "test/support/compare.h"
#include "test/support/criteo_tsv_gen.h"

using namespace shardrec;
using namespace shardrec::data;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
    const fs::path dir =
        fs::temp_directory_path() / ("shardrec_criteo_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

std::string read_bytes(const fs::path& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// Every file of a directory (name -> bytes).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
        out[e.path().filename().string()] = read_bytes(e.path());
    }
    return out;
}

struct Days {
    std::vector<std::string> paths;
    std::vector<test::CriteoSample> samples;  // all days, in order
    std::vector<int64_t> rows_per_day;
};

Days write_days(const fs::path& dir, const std::vector<uint64_t>& lines_per_day) {
    Days d;
    uint64_t first = 0;
    for (size_t i = 0; i < lines_per_day.size(); ++i) {
        const fs::path p = dir / ("day_" + std::to_string(i));
        auto s = test::write_criteo_tsv(p.string(), 21, first, lines_per_day[i]);
        d.samples.insert(d.samples.end(), s.begin(), s.end());
        d.paths.push_back(p.string());
        d.rows_per_day.push_back(static_cast<int64_t>(lines_per_day[i]));
        first += lines_per_day[i];
    }
    return d;
}

CriteoPreprocessOptions options(const Days& days, const fs::path& out, int threads) {
    CriteoPreprocessOptions o;
    o.inputs = days.paths;
    o.out_dir = out.string();
    o.layout = CriteoRecordLayout::one_hot(97);
    o.layout.num_embeddings[3] = 5;
    o.lines_per_shard = 40;
    o.chunk_lines = 7;
    o.threads = threads;
    return o;
}

// Checks record i of the data against sample s, computed independently of the engine.
void check_record(const uint8_t* rec, const test::CriteoSample& s, const CriteoRecordLayout& l) {
    float head[14];
    std::memcpy(head, rec, sizeof(head));
    CHECK(head[0] == static_cast<float>(s.label));
    for (size_t j = 0; j < 13; ++j) {
        const double want = std::log(1.0 + static_cast<double>(std::max<int64_t>(s.dense[j], 0)));
        CHECK(std::abs(head[1 + j] - want) <= 1e-6 * std::max(1.0, want));
    }
    for (size_t t = 0; t < 26; ++t) {
        int32_t id;
        std::memcpy(&id, rec + 56 + 4 * t, 4);
        CHECK(id == static_cast<int64_t>(s.sparse[t] % static_cast<uint64_t>(l.num_embeddings[t])));
    }
}

// The records of all shards in manifest order.
std::vector<std::string> all_records(const fs::path& dir) {
    const CriteoManifest m = read_criteo_manifest(dir.string());
    const auto bytes = static_cast<size_t>(m.layout.record_bytes());
    std::vector<std::string> out;
    for (const auto& in : m.inputs) {
        for (const auto& sh : in.shards) {
            const std::string data = read_bytes(dir / sh.file);
            for (size_t off = kShardHeaderBytes; off < data.size(); off += bytes) {
                out.push_back(data.substr(off, bytes));
            }
        }
    }
    return out;
}

std::vector<std::string> cat_names() {
    return criteo_sparse_feature_names();
}

CriteoBinaryOptions loader_options(const fs::path& dir) {
    CriteoBinaryOptions o;
    o.path = dir.string();
    o.feature_names = cat_names();
    o.num_embeddings.assign(26, 97);
    return o;
}

}  // namespace

TEST_CASE("criteo-preprocess: records equal an independent computation; manifest counts",
          "[data]") {
    const fs::path dir = fresh_dir("records");
    const Days days = write_days(dir, {95, 40, 13});
    const CriteoPreprocessOptions o = options(days, dir / "out", 2);
    const CriteoPreprocessSummary s = preprocess_criteo(o);
    CHECK(s.rows == 148);
    CHECK(s.skipped_lines == 0);
    CHECK(s.shards_written == 3 + 1 + 1);  // 95 lines: 40 + 40 + 15
    const CriteoManifest m = read_criteo_manifest((dir / "out").string());
    REQUIRE(m.inputs.size() == 3);
    CHECK(m.inputs[0].rows == 95);
    CHECK(m.inputs[0].lines == 95);
    CHECK(m.inputs[0].bytes == static_cast<int64_t>(fs::file_size(days.paths[0])));
    CHECK(m.inputs[0].shards.size() == 3);
    CHECK(m.inputs[2].shards[0].file == "shard_0002_00000.bin");
    CHECK(m.layout.num_embeddings[3] == 5);
    const auto records = all_records(dir / "out");
    REQUIRE(records.size() == days.samples.size());
    for (size_t i = 0; i < records.size(); ++i) {
        INFO("record " << i);
        check_record(reinterpret_cast<const uint8_t*>(records[i].data()), days.samples[i],
                     o.layout);
    }
}

TEST_CASE("criteo-preprocess: 1 and 3 threads write byte-identical shards and manifests",
          "[data]") {
    const fs::path dir = fresh_dir("threads");
    const Days days = write_days(dir, {130, 57});
    (void)preprocess_criteo(options(days, dir / "one", 1));
    CriteoPreprocessOptions o3 = options(days, dir / "three", 3);
    o3.chunk_lines = 3;  // many chunks in flight, finishing out of order
    (void)preprocess_criteo(o3);
    const auto one = snapshot(dir / "one");
    const auto three = snapshot(dir / "three");
    REQUIRE(one.size() == three.size());
    CHECK(one.size() == 4 + 2 + 1);
    for (const auto& [name, bytes] : one) {
        INFO(name);
        REQUIRE(three.count(name) == 1);
        CHECK(three.at(name) == bytes);
    }
}

TEST_CASE("criteo-preprocess: a rerun after an interruption writes identical output", "[data]") {
    const fs::path dir = fresh_dir("resume");
    const Days days = write_days(dir, {130, 57});
    const CriteoPreprocessOptions o = options(days, dir / "out", 2);
    (void)preprocess_criteo(o);
    const auto full = snapshot(dir / "out");
    SECTION("the last shard missing and a temporary file left behind") {
        fs::remove(dir / "out" / "shard_0001_00001.bin");
        fs::remove(dir / "out" / "manifest.json");
        std::ofstream(dir / "out" / "shard_0001_00001.bin.tmp") << "partial";
        const CriteoPreprocessSummary s = preprocess_criteo(o);
        CHECK(s.shards_reused == 5);
        CHECK(s.shards_written == 1);
        CHECK(s.bytes_read < static_cast<int64_t>(fs::file_size(days.paths[1])));
    }
    SECTION("an input interrupted in its middle") {
        fs::remove(dir / "out" / "shard_0000_00002.bin");
        fs::remove(dir / "out" / "shard_0000_00003.bin");
        fs::remove(dir / "out" / "shard_0001_00000.bin");
        const CriteoPreprocessSummary s = preprocess_criteo(o);
        CHECK(s.shards_reused == 2);  // day 1 continues from its first missing shard
        CHECK(s.shards_written == 2 + 2);
    }
    SECTION("a truncated shard is written again") {
        fs::resize_file(dir / "out" / "shard_0000_00001.bin", 100);
        const CriteoPreprocessSummary s = preprocess_criteo(o);
        CHECK(s.shards_written >= 1);  // at least the truncated one
        CHECK(s.shards_reused + s.shards_written == 6);
    }
    CHECK(snapshot(dir / "out") == full);
}

TEST_CASE("criteo-preprocess: a rerun with fewer inputs removes the shards it does not list",
          "[data]") {
    const fs::path dir = fresh_dir("fewer");
    const Days days = write_days(dir, {130, 57});
    (void)preprocess_criteo(options(days, dir / "out", 1));
    REQUIRE(fs::exists(dir / "out" / "shard_0001_00000.bin"));
    std::ofstream(dir / "out" / "notes.txt") << "kept";
    const Days first{{days.paths[0]}, {}, {}};
    const CriteoPreprocessSummary s = preprocess_criteo(options(first, dir / "out", 1));
    CHECK(s.shards_reused == 4);
    CHECK(s.shards_written == 0);
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir / "out"))
        names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"manifest.json", "notes.txt", "shard_0000_00000.bin",
                                            "shard_0000_00001.bin", "shard_0000_00002.bin",
                                            "shard_0000_00003.bin"});
}

// The bytes of shards and manifests written without --raw-ids are pinned: the CRC-32s below were
// taken from the writer before raw ids existed, so that layout may not change by accident.
TEST_CASE("criteo-preprocess: without raw ids the shards and manifest keep their bytes", "[data]") {
    const fs::path dir = fresh_dir("golden");
    const Days days = write_days(dir, {50, 20});
    CriteoPreprocessOptions o = options(days, dir / "out", 2);
    o.layout.multi_hot[7] = 3;
    (void)preprocess_criteo(o);
    std::map<std::string, uint32_t> crcs;
    for (auto [name, bytes] : snapshot(dir / "out")) {
        if (name == kCriteoManifestName) {  // the inputs' paths vary with the directory
            for (size_t at; (at = bytes.find(dir.string())) != std::string::npos;) {
                bytes.replace(at, dir.string().size(), "DIR");
            }
        }
        crcs[name] = crc32(bytes.data(), bytes.size());
        UNSCOPED_INFO(name << " " << std::hex << crcs[name]);
    }
    const std::map<std::string, uint32_t> pinned = {
        {"manifest.json", 0xd5f5aa74u},
        {"shard_0000_00000.bin", 0x78ca6603u},
        {"shard_0000_00001.bin", 0xe9a87744u},
        {"shard_0001_00000.bin", 0xc3576914u},
    };
    CHECK(crcs == pinned);
}

TEST_CASE("criteo-preprocess: shards from other options are refused, naming the shard", "[data]") {
    const fs::path dir = fresh_dir("foreign");
    const Days days = write_days(dir, {50});
    (void)preprocess_criteo(options(days, dir / "out", 1));
    CriteoPreprocessOptions other = options(days, dir / "out", 1);
    other.layout.num_embeddings[0] = 98;
    CHECK_THROWS_WITH(preprocess_criteo(other),
                      Contains("shard_0000_00000.bin was written for other options"));
}

TEST_CASE("criteo-preprocess: a pipe is refused by name; an empty day is kept and warned",
          "[data]") {
    const fs::path dir = fresh_dir("streams");
    const fs::path fifo = dir / "day_fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH(preprocess_criteo(options(Days{{fifo.string()}, {}, {}}, dir / "out", 1)),
                      Contains("'" + fifo.string() + "' is a pipe or another stream") &&
                          Contains("write it to a file first"));
    std::ofstream(dir / "empty").flush();
    const test::ExpectLogs warned;  // "DIR/empty: no rows (an empty file)"
    const CriteoPreprocessSummary s =
        preprocess_criteo(options(Days{{(dir / "empty").string()}, {}, {}}, dir / "e", 1));
    CHECK(s.rows == 0);
    CHECK(read_criteo_manifest((dir / "e").string()).inputs.size() == 1);
}

TEST_CASE("criteo-preprocess: buffered memory is bounded by the chunks, not the input", "[data]") {
    const fs::path dir = fresh_dir("memory");
    const Days days = write_days(dir, {6000});
    size_t longest = 0;
    for (const auto& s : days.samples) {
        longest = std::max(longest, s.line.size() + 1);
    }
    CriteoPreprocessOptions o = options(days, dir / "out", 2);
    o.chunk_lines = 16;
    o.lines_per_shard = 1000;
    const CriteoPreprocessSummary s = preprocess_criteo(o);
    CHECK(s.rows == 6000);
    // The reader's chunk plus `threads` chunks in flight, each at most chunk_lines lines.
    const auto chunk = static_cast<int64_t>(o.chunk_lines * (longest + o.layout.record_bytes()));
    const int64_t bound = (o.threads + 1) * chunk;
    const auto input = static_cast<int64_t>(fs::file_size(days.paths[0]));
    INFO("peak " << s.peak_buffered_bytes << " bound " << bound << " input " << input);
    CHECK(s.peak_buffered_bytes > 0);
    CHECK(s.peak_buffered_bytes <= bound);
    CHECK(s.peak_buffered_bytes <= criteo_preprocess_buffer_bound(o));
    CHECK(bound * 20 < input);
}

TEST_CASE("criteo-preprocess: a bad line stops with FILE:LINE and the field, nothing partial",
          "[data]") {
    const fs::path dir = fresh_dir("bad");
    Days days = write_days(dir, {30, 30});
    {
        std::ofstream f(days.paths[1], std::ios::app);
        f << test::criteo_sample(1, 1).line << "\n";
        std::string bad = test::criteo_sample(1, 2).line;
        bad.replace(bad.rfind('\t') + 1, std::string::npos, "nothex");
        f << bad << "\n";
    }
    CriteoPreprocessOptions o = options(days, dir / "out", 2);
    o.lines_per_shard = 1000;
    CHECK_THROWS_WITH(
        preprocess_criteo(o),
        Contains(days.paths[1] + ":32: field cat_25 (column 40)") && Contains("--skip-bad-lines"));
    CHECK(!fs::exists(dir / "out" / "manifest.json"));
    CHECK(!fs::exists(dir / "out" / "shard_0001_00000.bin"));
    CHECK(!fs::exists(dir / "out" / "shard_0001_00000.bin.tmp"));
    SECTION("too few fields") {
        fs::remove_all(dir / "out");  // day 0 changes: its earlier shards no longer match
        std::ofstream(days.paths[0], std::ios::app) << "1\t2\t3\n";
        CHECK_THROWS_WITH(preprocess_criteo(o),
                          Contains(days.paths[0] + ":31: expected 40 tab-separated fields, got 3"));
    }
    SECTION("a label other than 0 or 1") {
        fs::remove_all(dir / "out");
        std::string two = test::criteo_sample(1, 3).line;
        two[0] = '2';
        std::ofstream(days.paths[0], std::ios::app) << two << "\n";
        CHECK_THROWS_WITH(preprocess_criteo(o),
                          Contains(days.paths[0] + ":31: field label (column 1): label must be 0 "
                                                   "or 1: '2'"));
    }
    SECTION("--skip-bad-lines counts and skips them") {
        o.skip_bad_lines = true;
        const test::ExpectLogs expect_warning;  // "skipping FILE:LINE: ..."
        const CriteoPreprocessSummary s = preprocess_criteo(o);
        CHECK(s.rows == 61);
        CHECK(s.skipped_lines == 1);
        const CriteoManifest m = read_criteo_manifest((dir / "out").string());
        CHECK(m.inputs[1].lines == 32);
        CHECK(m.inputs[1].rows == 31);
        CHECK(m.inputs[1].skipped_lines == 1);
        CHECK(all_records(dir / "out").size() == 61);
    }
}

// ---- the loader ----

TEST_CASE("CriteoBinaryDataset: batches hold the preprocessed samples; last day is eval",
          "[data]") {
    const fs::path dir = fresh_dir("loader");
    const Days days = write_days(dir, {95, 40, 13});
    CriteoPreprocessOptions o = options(days, dir / "out", 2);
    o.layout.multi_hot[7] = 3;
    (void)preprocess_criteo(o);
    CriteoBinaryOptions lo = loader_options(dir / "out");
    // A reordered subset of the columns, as a model might use them.
    lo.feature_names = {"cat_7", "cat_0", "cat_3"};
    lo.num_embeddings = {97, 97, 5};
    const CriteoBinaryDataset ds(lo);
    CHECK(ds.num_samples(Split::kTrain) == 135);
    CHECK(ds.num_samples(Split::kEval) == 13);
    const Batch b = ds.batch(90, 50, Split::kTrain);  // wraps around after row 134
    REQUIRE(b.batch_size() == 50);
    const KeyedJaggedTensor& kjt = b.sparse;
    REQUIRE(kjt.keys() == std::vector<std::string>{"cat_7", "cat_0", "cat_3"});
    const int64_t* values = kjt.values().data<int64_t>();
    const int64_t* lengths = kjt.lengths().data<int64_t>();
    for (int64_t i = 0; i < 50; ++i) {
        const test::CriteoSample& s = days.samples[static_cast<size_t>((90 + i) % 135)];
        INFO("sample " << i);
        CHECK(b.labels.data<float>()[i] == static_cast<float>(s.label));
        const double want = std::log(1.0 + static_cast<double>(std::max<int64_t>(s.dense[12], 0)));
        CHECK(std::abs(b.dense.data<float>()[i * 13 + 12] - want) <= 1e-6 * std::max(1.0, want));
        CHECK(lengths[i] == 3);
        CHECK(lengths[50 + i] == 1);
        CHECK(lengths[100 + i] == 1);
        CHECK(values[3 * i] == static_cast<int64_t>(s.sparse[7] % 97));  // multi-hot id 0
        CHECK(values[150 + i] == static_cast<int64_t>(s.sparse[0] % 97));
        CHECK(values[200 + i] == static_cast<int64_t>(s.sparse[3] % 5));
    }
    const Batch e = ds.batch(0, 13, Split::kEval);
    for (int64_t i = 0; i < 13; ++i) {
        CHECK(e.sparse.values().data<int64_t>()[3 * 13 + i] ==
              static_cast<int64_t>(days.samples[135 + static_cast<size_t>(i)].sparse[0] % 97));
    }
    SECTION("eval_fraction takes the last rows instead") {
        lo.eval_fraction = 0.25;
        const CriteoBinaryDataset f(lo);
        CHECK(f.num_samples(Split::kEval) == 37);
        CHECK(f.num_samples(Split::kTrain) == 111);
    }
}

namespace {

// Days whose cat_1 values lie above 2^32, cat_5's above 2^62 and cat_9's above 2^63 (16 hex
// digits: any 64-bit id), the other features as generated.
Days write_wide_days(const fs::path& dir, const std::vector<uint64_t>& lines_per_day) {
    Days d = write_days(dir, lines_per_day);
    size_t i = 0;
    for (size_t day = 0; day < d.paths.size(); ++day) {
        std::ofstream f(d.paths[day], std::ios::binary);
        for (int64_t r = 0; r < d.rows_per_day[day]; ++r, ++i) {
            test::CriteoSample& s = d.samples[i];
            s.sparse[1] += (uint64_t{1} << 32) * (1 + i % 5);
            s.sparse[5] |= uint64_t{1} << 62;
            s.sparse[9] = ~s.sparse[9];
            std::string line = std::to_string(s.label);
            for (size_t j = 0; j < 13; ++j) {
                line += "\t" + std::to_string(s.dense[j]);
            }
            for (size_t t = 0; t < 26; ++t) {
                line += fmt::format("\t{:x}", s.sparse[t]);
            }
            f << line << "\n";
        }
    }
    return d;
}

}  // namespace

TEST_CASE("criteo-preprocess --raw-ids: 64-bit ids round-trip through shards to the batches",
          "[data]") {
    const fs::path dir = fresh_dir("raw");
    const Days days = write_wide_days(dir, {70, 25});
    CriteoPreprocessOptions o = options(days, dir / "out", 2);
    o.layout.multi_hot[7] = 3;
    for (const int t : {1, 5, 9}) {
        o.layout.set_raw(t);
    }
    (void)preprocess_criteo(o);
    const CriteoManifest m = read_criteo_manifest((dir / "out").string());
    CHECK(m.layout.raw_ids == o.layout.raw_ids);
    CHECK(m.layout.num_embeddings[1] == 0);
    CHECK(m.layout.record_bytes() == 4 * (1 + 13 + 22 + 3) + 8 * 3);
    CHECK_THAT(read_bytes(dir / "out" / "manifest.json"),
               Contains("\"version\": 2") && Contains("\"raw_ids\": true"));
    CriteoBinaryOptions lo = loader_options(dir / "out");
    lo.feature_names = {"cat_9", "cat_1", "cat_3", "cat_5", "cat_7"};
    lo.num_embeddings = {10, 10, 5, 10, 97};  // managed: the rows do not bound the raw ids
    lo.managed = {true, true, false, true, false};
    const CriteoBinaryDataset ds(lo);
    CHECK(ds.num_samples(Split::kTrain) == 70);
    const Batch b = ds.batch(0, 95, Split::kTrain);  // wraps around after row 69
    const int64_t* v = b.sparse.values().data<int64_t>();
    int wide = 0;
    for (int64_t i = 0; i < 95; ++i) {
        const test::CriteoSample& s = days.samples[static_cast<size_t>(i % 70)];
        INFO("sample " << i);
        CHECK(static_cast<uint64_t>(v[i]) == s.sparse[9]);
        CHECK(static_cast<uint64_t>(v[95 + i]) == s.sparse[1]);
        CHECK(v[2 * 95 + i] == static_cast<int64_t>(s.sparse[3] % 5));
        CHECK(static_cast<uint64_t>(v[3 * 95 + i]) == s.sparse[5]);
        CHECK(v[4 * 95 + 3 * i] == static_cast<int64_t>(s.sparse[7] % 97));
        wide += s.sparse[1] > (uint64_t{1} << 32) && s.sparse[5] > (uint64_t{1} << 62) &&
                s.sparse[9] > (uint64_t{1} << 63);
    }
    CHECK(wide > 50);  // the test data does hold such values (an empty field is 0)

    SECTION("a raw-id feature without managed_collision is refused, naming it") {
        lo.managed[3] = false;
        lo.table_names = {"t9", "t1", "t3", "t5", "t7"};
        CHECK_THROWS_WITH(
            CriteoBinaryDataset(lo),
            Contains("feature 'cat_5' holds raw 64-bit ids (criteo-preprocess --raw-ids) but its "
                     "table 't5' has no managed_collision") &&
                Contains("add model.tables[].managed_collision to it, or preprocess without "
                         "--raw-ids"));
    }
    SECTION("a rerun without --raw-ids does not mix its shards with these") {
        CHECK_THROWS_WITH(preprocess_criteo(options(days, dir / "out", 1)),
                          Contains("shard_0000_00000.bin was written for other options"));
    }
    SECTION("an interrupted run resumes to the same bytes") {
        const auto full = snapshot(dir / "out");
        fs::remove(dir / "out" / "shard_0000_00001.bin");
        fs::remove(dir / "out" / "manifest.json");
        const CriteoPreprocessSummary s = preprocess_criteo(o);
        CHECK(s.shards_reused == 2);
        CHECK(snapshot(dir / "out") == full);
    }
}

TEST_CASE("CriteoBinaryDataset: a global batch is the concatenation of its rank slices", "[data]") {
    const fs::path dir = fresh_dir("slices");
    const Days days = write_days(dir, {60, 20});
    (void)preprocess_criteo(options(days, dir / "out", 1));
    const CriteoBinaryDataset ds(loader_options(dir / "out"));
    const int64_t world_size = 4;
    const int64_t B = 5;
    for (int64_t step : {0, 1, 2, 7}) {
        const Batch global = ds.batch(step * world_size * B, world_size * B, Split::kTrain);
        for (int64_t r = 0; r < world_size; ++r) {
            const Batch local = ds.batch(step * world_size * B + r * B, B, Split::kTrain);
            CHECK(std::memcmp(local.dense.data<float>(), global.dense.data<float>() + r * B * 13,
                              sizeof(float) * B * 13) == 0);
            for (int64_t f = 0; f < 26; ++f) {
                CHECK(
                    std::memcmp(local.sparse.values().data<int64_t>() + f * B,
                                global.sparse.values().data<int64_t>() + f * world_size * B + r * B,
                                sizeof(int64_t) * B) == 0);
            }
        }
    }
}

TEST_CASE("CriteoBinaryDataset: damaged or mismatched data is an error naming the shard",
          "[data]") {
    const fs::path dir = fresh_dir("damaged");
    const Days days = write_days(dir, {60, 20});
    (void)preprocess_criteo(options(days, dir / "out", 1));
    const fs::path shard = dir / "out" / "shard_0000_00001.bin";
    CriteoBinaryOptions lo = loader_options(dir / "out");
    SECTION("a label other than 0 or 1, behind a valid checksum: refused by record") {
        // What another writer (or an edit that fixed up the checksums) could leave behind.
        std::string bytes = read_bytes(shard);
        const size_t record_bytes = 4 + 4 * 13 + 4 * 26;
        const float label = 2.0f;
        std::memcpy(&bytes[kShardHeaderBytes + 5 * record_bytes], &label, 4);
        ShardHeader h = parse_shard_header(reinterpret_cast<const uint8_t*>(bytes.data()),
                                           bytes.size(), "shard");
        h.payload_crc32 = crc32(bytes.data() + kShardHeaderBytes, bytes.size() - kShardHeaderBytes);
        encode_shard_header(h, reinterpret_cast<uint8_t*>(bytes.data()));
        std::ofstream(shard, std::ios::binary) << bytes;
        CriteoManifest m = read_criteo_manifest((dir / "out").string());
        REQUIRE(m.inputs[0].shards[1].file == "shard_0000_00001.bin");
        m.inputs[0].shards[1].crc32 = h.payload_crc32;
        std::ofstream(dir / "out" / "manifest.json") << criteo_manifest_json(m);
        const CriteoBinaryDataset ds(lo);
        CHECK_NOTHROW(ds.batch(0, 40, Split::kTrain));  // rows of shard 0 only
        CHECK_THROWS_WITH(ds.batch(35, 10, Split::kTrain),
                          Contains("shard_0000_00001.bin: record 5 has label 2, expected 0 or 1"));
    }
    SECTION("truncated: refused on open") {
        fs::resize_file(shard, fs::file_size(shard) - 3);
        CHECK_THROWS_WITH(CriteoBinaryDataset(lo),
                          Contains("shard_0000_00001.bin") && Contains("truncated"));
    }
    SECTION("a flipped payload byte: refused before its first batch is used") {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(static_cast<std::streamoff>(kShardHeaderBytes + 17));
        const char byte = static_cast<char>(f.get() ^ 0x10);
        f.seekp(static_cast<std::streamoff>(kShardHeaderBytes + 17));
        f.put(byte);
        f.close();
        const CriteoBinaryDataset ds(lo);
        CHECK_NOTHROW(ds.batch(0, 40, Split::kTrain));  // rows of shard 0 only
        CHECK_THROWS_WITH(ds.batch(35, 10, Split::kTrain),
                          Contains("shard_0000_00001.bin") && Contains("checksum mismatch"));
    }
    SECTION("missing") {
        fs::remove(shard);
        CHECK_THROWS_WITH(CriteoBinaryDataset(lo),
                          Contains("the data shard '" + shard.string() + "' does not exist"));
    }
    SECTION("a directory in its place") {
        fs::remove(shard);
        fs::create_directory(shard);
        CHECK_THROWS_WITH(CriteoBinaryDataset(lo), Contains("the data shard '" + shard.string() +
                                                            "' is a directory, expected a file"));
    }
    SECTION("a table smaller than the data's ids") {
        lo.num_embeddings[4] = 96;
        CHECK_THROWS_WITH(CriteoBinaryDataset(lo),
                          Contains("feature 'cat_4' has ids up to 96") && Contains("has 96 rows"));
        lo.managed.assign(26, false);
        lo.managed[4] = true;  // a managed-collision table remaps any ids to its rows
        CHECK_NOTHROW(CriteoBinaryDataset(lo));
    }
    SECTION("a feature that is not a Criteo column") {
        lo.feature_names[2] = "f_t2";
        CHECK_THROWS_WITH(CriteoBinaryDataset(lo),
                          Contains("feature 'f_t2' is not a Criteo column"));
    }
    SECTION("no manifest") {
        fs::remove(dir / "out" / "manifest.json");
        CHECK_THROWS_WITH(CriteoBinaryDataset(lo), Contains("manifest.json' does not exist"));
    }
    SECTION("a file where the data directory should be") {
        lo.path = shard.string();
        CHECK_THROWS_WITH(CriteoBinaryDataset(lo),
                          Contains("criteo data '" + shard.string() + "' is not a directory"));
    }
    SECTION("eval_days leaving no train day") {
        lo.eval_days = 2;
        CHECK_THROWS_WITH(CriteoBinaryDataset(lo), Contains("eval_days 2 leaves no training day"));
    }
}

TEST_CASE("BatchPrefetcher: any order of steps gives the producer's batches; errors rethrow",
          "[data]") {
    std::atomic<int> calls{0};
    auto producer = [&calls](int64_t step) {
        ++calls;
        SR_CHECK(step != 13, "no batch for step {}", step);
        Batch b;
        b.labels = Tensor::empty({1}, DType::kF32);
        b.labels.data<float>()[0] = static_cast<float>(step);
        return b;
    };
    BatchPrefetcher prefetcher(producer, 2);
    for (int64_t step : {0, 1, 2, 3, 7, 8, 2, 9, 10}) {
        double wait_s = -1;
        const Batch b = prefetcher.get(step, &wait_s);
        CHECK(b.labels.data<float>()[0] == static_cast<float>(step));
        CHECK(wait_s >= 0);
    }
    CHECK_THROWS_WITH(prefetcher.get(13), Contains("no batch for step 13"));
    CHECK(prefetcher.get(14).labels.data<float>()[0] == 14.0f);
}
