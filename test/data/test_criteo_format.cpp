// The Criteo TSV parser (field rules and errors that name the field), CRC-32 against known
// values, the binary record (dense transform, id modulo, multi-hot materialisation) and the shard
// header / manifest checks, all as pure functions.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "engine/core/crc32.h"
#include "engine/core/error.h"
#include "engine/data/criteo_record.h"
#include "engine/data/criteo_shard.h"
#include "engine/data/criteo_tsv.h"
#include "test/support/criteo_tsv_gen.h"

using namespace shardrec;
using namespace shardrec::data;
using Catch::Matchers::Contains;

namespace {

// A line of 40 fields where field `column` (0-based) is replaced by `value`.
std::string line_with(int column, const std::string& value) {
    std::vector<std::string> fields = {"1"};
    for (int j = 0; j < 13; ++j) {
        fields.push_back(std::to_string(j));
    }
    for (int t = 0; t < 26; ++t) {
        fields.push_back("a0b1c2d3");
    }
    fields[static_cast<size_t>(column)] = value;
    std::string line = fields[0];
    for (size_t i = 1; i < fields.size(); ++i) {
        line += "\t" + fields[i];
    }
    return line;
}

std::string parse_error(const std::string& line) {
    CriteoLine out;
    return parse_criteo_line(line, out);
}

}  // namespace

TEST_CASE("Criteo TSV: generated lines parse to the values that were written", "[data]") {
    for (uint64_t i = 0; i < 500; ++i) {
        const test::CriteoSample s = test::criteo_sample(11, i);
        CriteoLine line;
        REQUIRE(parse_criteo_line(s.line, line).empty());
        CHECK(line.label == s.label);
        for (size_t j = 0; j < 13; ++j) {
            CHECK(line.dense[j] == s.dense[j]);
        }
        for (size_t t = 0; t < 26; ++t) {
            CHECK(line.sparse[t] == s.sparse[t]);
        }
    }
}

TEST_CASE("Criteo TSV: empty fields are 0, CRLF and upper-case hex are accepted", "[data]") {
    std::string line = "0";
    for (int j = 0; j < 39; ++j) {
        line += "\t";
    }
    CriteoLine out;
    out.dense.fill(7);
    out.sparse.fill(7);
    REQUIRE(parse_criteo_line(line + "\r", out).empty());
    CHECK(out.label == 0);
    CHECK(out.dense == std::array<int64_t, 13>{});
    CHECK(out.sparse == std::array<uint64_t, 26>{});
    REQUIRE(parse_criteo_line(line_with(14, "FFFFFFFF"), out).empty());
    CHECK(out.sparse[0] == 0xffffffffull);
    REQUIRE(parse_criteo_line(line_with(3, "-3"), out).empty());
    CHECK(out.dense[2] == -3);
    REQUIRE(parse_criteo_line(line_with(5, "-9223372036854775808"), out).empty());
    CHECK(out.dense[4] == INT64_MIN);
}

TEST_CASE("Criteo TSV: malformed lines are errors that name the field", "[data]") {
    CHECK_THAT(parse_error(""), Contains("expected 40 tab-separated fields, got 1"));
    const std::string good = line_with(0, "1");
    CHECK_THAT(parse_error(good.substr(0, good.rfind('\t'))), Contains("got 39"));
    CHECK_THAT(parse_error(good + "\t"), Contains("got 41"));
    CHECK_THAT(parse_error(line_with(0, "2")), Contains("field label (column 1)"));
    CHECK_THAT(parse_error(line_with(0, "")), Contains("field label"));
    CHECK_THAT(parse_error(line_with(4, "abc")),
               Contains("field int_3 (column 5): not an integer: 'abc'"));
    CHECK_THAT(parse_error(line_with(1, "1.5")), Contains("field int_0"));
    CHECK_THAT(parse_error(line_with(1, "-")), Contains("field int_0"));
    CHECK_THAT(parse_error(line_with(1, "+4")), Contains("field int_0"));
    CHECK_THAT(parse_error(line_with(13, "9223372036854775808")), Contains("field int_12"));
    CHECK_THAT(parse_error(line_with(21, "xyz")), Contains("field cat_7 (column 22)"));
    CHECK_THAT(parse_error(line_with(39, "12345678901234567")), Contains("field cat_25"));
    CHECK_THAT(parse_error(line_with(14, " a0")), Contains("field cat_0"));
    // Bytes that are not printable are escaped in the message.
    CHECK_THAT(parse_error(line_with(2, std::string("\x01\xff", 2))), Contains("'\\x01\\xff'"));
}

TEST_CASE("CRC-32: known values, and incremental equals one shot", "[data]") {
    CHECK(crc32("", 0) == 0u);
    CHECK(crc32("123456789", 9) == 0xCBF43926u);
    CHECK(crc32("The quick brown fox jumps over the lazy dog", 43) == 0x414FA339u);
    std::vector<uint8_t> bytes(1001);
    for (size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = static_cast<uint8_t>(rng::hash(3, i));
    }
    for (size_t split : {0, 1, 3, 500, 1001}) {
        const uint32_t a = crc32(bytes.data(), split);
        CHECK(crc32(bytes.data() + split, bytes.size() - split, a) ==
              crc32(bytes.data(), bytes.size()));
    }
}

TEST_CASE("Criteo record: label, log(max(x,0)+1) dense and hex mod E ids", "[data]") {
    CriteoRecordLayout layout = CriteoRecordLayout::one_hot(1000);
    layout.num_embeddings[5] = 7;
    REQUIRE(layout.record_bytes() == 4 * (1 + 13 + 26));
    std::vector<uint8_t> rec(static_cast<size_t>(layout.record_bytes()));
    for (uint64_t i = 0; i < 200; ++i) {
        const test::CriteoSample s = test::criteo_sample(5, i);
        CriteoLine line;
        REQUIRE(parse_criteo_line(s.line, line).empty());
        encode_criteo_record(line, layout, rec.data());
        float head[14];
        std::memcpy(head, rec.data(), sizeof(head));
        CHECK(head[0] == static_cast<float>(s.label));
        for (size_t j = 0; j < 13; ++j) {
            const double want =
                std::log(1.0 + static_cast<double>(std::max<int64_t>(s.dense[j], 0)));
            CHECK(std::abs(head[1 + j] - want) <= 1e-6 * std::max(1.0, want));
        }
        for (size_t t = 0; t < 26; ++t) {
            int32_t id;
            std::memcpy(&id, rec.data() + 56 + 4 * t, 4);
            CHECK(id == static_cast<int32_t>(s.sparse[t] %
                                             static_cast<uint64_t>(layout.num_embeddings[t])));
        }
    }
}

TEST_CASE("Criteo record: multi-hot bags start with the one-hot id and depend only on it",
          "[data]") {
    CriteoRecordLayout layout;
    layout.num_embeddings = mlperf_dcnv2_num_embeddings();
    layout.multi_hot = mlperf_dcnv2_multi_hot();
    layout.multi_hot_seed = 3;
    REQUIRE(layout.ids_per_sample() == 214);  // MLPerf DLRM-DCNv2: 214 ids per sample
    layout.validate();
    std::vector<uint8_t> a(static_cast<size_t>(layout.record_bytes()));
    std::vector<uint8_t> b(a.size());
    CriteoLine one;
    CriteoLine two;
    REQUIRE(parse_criteo_line(test::criteo_sample(9, 0).line, one).empty());
    two = one;
    two.label = 1 - one.label;
    two.dense[0] += 5;  // other fields differ, the categorical values do not
    encode_criteo_record(one, layout, a.data());
    encode_criteo_record(two, layout, b.data());
    CHECK(std::memcmp(a.data() + 56, b.data() + 56, a.size() - 56) == 0);
    for (int t = 0; t < 26; ++t) {
        const int64_t E = layout.num_embeddings[static_cast<size_t>(t)];
        const int64_t L = layout.multi_hot[static_cast<size_t>(t)];
        const uint8_t* ids = a.data() + layout.sparse_offset(t);
        std::vector<int32_t> bag(static_cast<size_t>(L));
        std::memcpy(bag.data(), ids, 4 * static_cast<size_t>(L));
        CHECK(bag[0] ==
              static_cast<int32_t>(one.sparse[static_cast<size_t>(t)] % static_cast<uint64_t>(E)));
        for (int64_t j = 0; j < L; ++j) {
            CHECK(bag[static_cast<size_t>(j)] >= 0);
            CHECK(bag[static_cast<size_t>(j)] < E);
        }
    }
    // The offsets are spread over the table: for a big table the L-1 extra ids differ.
    const int64_t L20 = layout.multi_hot[20];
    std::vector<int32_t> bag(static_cast<size_t>(L20));
    std::memcpy(bag.data(), a.data() + layout.sparse_offset(20), 4 * static_cast<size_t>(L20));
    std::sort(bag.begin(), bag.end());
    CHECK(std::unique(bag.begin(), bag.end()) - bag.begin() >= L20 - 2);
}

TEST_CASE("Criteo record: layout validation names the feature", "[data]") {
    CriteoRecordLayout layout = CriteoRecordLayout::one_hot(10);
    layout.num_embeddings[3] = 0;
    CHECK_THROWS_WITH(layout.validate(), Contains("cat_3 has 0 rows"));
    layout = CriteoRecordLayout::one_hot(kCriteoMaxTableRows + 1);
    CHECK_THROWS_WITH(layout.validate(), Contains("cat_0"));
    layout = CriteoRecordLayout::one_hot(10);
    layout.multi_hot.pop_back();
    CHECK_THROWS_WITH(layout.validate(), Contains("need 26"));
}

// ---- shards ----

namespace {

std::vector<uint8_t> make_shard(uint32_t record_bytes, uint64_t rows) {
    std::vector<uint8_t> shard(kShardHeaderBytes + record_bytes * rows);
    for (size_t i = kShardHeaderBytes; i < shard.size(); ++i) {
        shard[i] = static_cast<uint8_t>(rng::hash(1, i));
    }
    for (uint64_t r = 0; r < rows; ++r) {  // random bytes, but 0/1 labels
        const auto label = static_cast<float>(r % 2);
        std::memcpy(&shard[kShardHeaderBytes + r * record_bytes], &label, 4);
    }
    ShardHeader h;
    h.record_bytes = record_bytes;
    h.rows = rows;
    h.input_end_offset = 12345;
    h.input_end_line = 77;
    h.skipped_lines = 2;
    h.fingerprint = 0xfeedbeefcafe;
    h.payload_crc32 = crc32(shard.data() + kShardHeaderBytes, shard.size() - kShardHeaderBytes);
    encode_shard_header(h, shard.data());
    return shard;
}

}  // namespace

TEST_CASE("Criteo shard: the header round-trips and a whole shard checks", "[data]") {
    const std::vector<uint8_t> shard = make_shard(160, 9);
    const ShardHeader h = check_shard(shard.data(), shard.size(), "s.bin", 160, true);
    CHECK(h.rows == 9);
    CHECK(h.record_bytes == 160);
    CHECK(h.input_end_offset == 12345);
    CHECK(h.input_end_line == 77);
    CHECK(h.skipped_lines == 2);
    CHECK(h.fingerprint == 0xfeedbeefcafe);
}

TEST_CASE("Criteo shard: truncated, extended or corrupted shards are errors naming the shard",
          "[data]") {
    const std::vector<uint8_t> good = make_shard(160, 9);
    auto check = [](const std::vector<uint8_t>& s, uint32_t record_bytes = 160) {
        (void)check_shard(s.data(), s.size(), "day3/shard_0003_00001.bin", record_bytes, true);
    };
    std::vector<uint8_t> s = good;
    s.resize(s.size() - 1);
    CHECK_THROWS_WITH(check(s), Contains("shard_0003_00001.bin") && Contains("truncated"));
    s = good;
    s.push_back(0);
    CHECK_THROWS_WITH(check(s), Contains("truncated or extended"));
    s = good;
    s[kShardHeaderBytes + 100] ^= 0x10;
    CHECK_THROWS_WITH(check(s), Contains("shard_0003_00001.bin") && Contains("checksum mismatch"));
    s = good;
    s[20] ^= 1;  // rows
    CHECK_THROWS_WITH(check(s), Contains("header checksum mismatch"));
    s = good;
    s[0] = 'X';
    CHECK_THROWS_WITH(check(s), Contains("not a shardrec Criteo shard"));
    s.assign(good.begin(), good.begin() + 10);
    CHECK_THROWS_WITH(check(s), Contains("shorter than its 64-byte header"));
    CHECK_THROWS_WITH(check(good, 164), Contains("the manifest says 164"));
}

TEST_CASE("Criteo shard: a label other than 0 or 1 is refused with the record and the value",
          "[data]") {
    for (const float label : {2.0f, -1.0f, 0.5f, std::nanf("")}) {
        std::vector<uint8_t> s = make_shard(160, 9);
        std::memcpy(&s[kShardHeaderBytes + 7 * 160], &label, 4);
        INFO(label);
        CHECK_NOTHROW(check_shard(s.data(), s.size(), "s.bin", 160, false));  // open: no scan
        CHECK_THROWS_WITH(check_shard_labels(s.data(), s.size(), "day3/shard_0003_00001.bin", 160),
                          Contains("data shard day3/shard_0003_00001.bin: record 7 has label " +
                                   fmt::format("{}", label) + ", expected 0 or 1"));
    }
    const std::vector<uint8_t> good = make_shard(160, 9);
    CHECK_NOTHROW(check_shard_labels(good.data(), good.size(), "s.bin", 160));
    // A header whose records are shorter than a label (found by fuzz_criteo_shard): refused, not
    // read past the end.
    std::vector<uint8_t> tiny = make_shard(4, 3);  // 12 payload bytes: 6 records of 2 bytes
    ShardHeader h = parse_shard_header(tiny.data(), tiny.size(), "t.bin");
    h.record_bytes = 2;
    h.rows = 6;
    encode_shard_header(h, tiny.data());
    CHECK_THROWS_WITH(check_shard(tiny.data(), tiny.size(), "t.bin", 2, true),
                      Contains("records of 2 bytes cannot hold the 4-byte label"));
}

TEST_CASE("Criteo manifest: JSON round trip and errors name the key", "[data]") {
    CriteoManifest m;
    m.layout = CriteoRecordLayout::one_hot(100);
    m.layout.multi_hot[4] = 3;
    m.layout.multi_hot_seed = 9;
    m.lines_per_shard = 50;
    CriteoInputInfo in;
    in.path = "dir with \"quote\"/day_0";
    in.bytes = 1000;
    in.lines = 60;
    in.rows = 58;
    in.skipped_lines = 2;
    in.shards = {{"shard_0000_00000.bin", 49, 0xabc, 0x1234},
                 {"shard_0000_00001.bin", 9, 0xabc, 7}};
    m.inputs = {in};
    const CriteoManifest back = parse_criteo_manifest(criteo_manifest_json(m), "m.json");
    CHECK(back.layout.num_embeddings == m.layout.num_embeddings);
    CHECK(back.layout.multi_hot == m.layout.multi_hot);
    CHECK(back.layout.multi_hot_seed == 9);
    CHECK(back.lines_per_shard == 50);
    REQUIRE(back.inputs.size() == 1);
    CHECK(back.inputs[0].path == in.path);
    CHECK(back.inputs[0].rows == 58);
    CHECK(back.inputs[0].skipped_lines == 2);
    REQUIRE(back.inputs[0].shards.size() == 2);
    CHECK(back.inputs[0].shards[1].crc32 == 7);
    CHECK(back.inputs[0].shards[0].fingerprint == 0xabc);
    CHECK(back.total_rows() == 58);
    std::string text = criteo_manifest_json(m);
    text.replace(text.find("\"rows\": 9"), 9, "\"rows\": 8");
    CHECK_THROWS_WITH(parse_criteo_manifest(text, "m.json"),
                      Contains("rows 58 but its shards hold 57"));
    CHECK_THROWS_WITH(parse_criteo_manifest("{", "m.json"), Contains("m.json"));
    CHECK_THROWS_WITH(parse_criteo_manifest("{\"format\": \"x\"}", "m.json"),
                      Contains("not a shardrec Criteo manifest"));
}

// ---- raw ids (criteo-preprocess --raw-ids) ----

namespace {

// Values a 64-bit id can take: a 32-bit Criteo hash, just above 2^32, above 2^62 and 2^63 (an i64
// below zero: the bits are kept, a managed-collision remap reads them as uint64).
constexpr uint64_t kRawValues[] = {0xa0b1c2d3ull, 0x100000001ull, 0x4000000000000005ull,
                                   0xfedcba9876543210ull};

CriteoRecordLayout raw_layout() {
    CriteoRecordLayout layout = CriteoRecordLayout::one_hot(1000);
    layout.multi_hot[2] = 3;
    for (const int t : {0, 5, 6, 25}) {
        layout.set_raw(t);
    }
    return layout;
}

}  // namespace

TEST_CASE("Criteo record: raw-id features hold the value's 64 bits, the others id mod E",
          "[data]") {
    const CriteoRecordLayout layout = raw_layout();
    REQUIRE_NOTHROW(layout.validate());
    CHECK(layout.any_raw());
    CHECK(!CriteoRecordLayout::one_hot(10).any_raw());
    // 22 features of i32 (cat_2 with 3 ids), 4 of i64.
    CHECK(layout.record_bytes() == 4 * (1 + 13) + 4 * (21 + 3) + 8 * 4);
    CHECK(layout.sparse_offset(5) == 56 + 8 + 4 * (3 + 1 + 1 + 1));
    CHECK(layout.sparse_offset(6) == layout.sparse_offset(5) + 8);
    CHECK(layout.sparse_offset(25) == layout.record_bytes() - 8);
    std::vector<uint8_t> rec(static_cast<size_t>(layout.record_bytes()));
    for (const uint64_t v : kRawValues) {
        // 16 hex digits: any 64-bit id parses, in the TSV as in the record.
        CriteoLine line;
        const std::string hex = fmt::format("{:x}", v);
        REQUIRE(parse_criteo_line(line_with(14 + 5, hex), line).empty());
        REQUIRE(line.sparse[5] == v);
        line.sparse[0] = v;
        line.sparse[1] = v;
        line.sparse[25] = v;
        encode_criteo_record(line, layout, rec.data());
        INFO(hex);
        for (const int t : {0, 5, 25}) {
            int64_t id;
            std::memcpy(&id, rec.data() + layout.sparse_offset(t), 8);
            CHECK(static_cast<uint64_t>(id) == v);
        }
        int32_t id1;
        std::memcpy(&id1, rec.data() + layout.sparse_offset(1), 4);
        CHECK(id1 == static_cast<int32_t>(v % 1000));
        int64_t id6;  // a raw feature holding a 32-bit hash: widened
        std::memcpy(&id6, rec.data() + layout.sparse_offset(6), 8);
        CHECK(id6 == static_cast<int64_t>(0xa0b1c2d3ull));  // line_with's value
    }
}

TEST_CASE("Criteo record: a raw-id feature must be one-hot with no rows", "[data]") {
    CriteoRecordLayout layout = raw_layout();
    layout.multi_hot[5] = 2;
    CHECK_THROWS_WITH(layout.validate(), Contains("cat_5 has raw ids") &&
                                             Contains("num_embeddings 0 and multi-hot size 1"));
    layout = raw_layout();
    layout.num_embeddings[25] = 1000;
    CHECK_THROWS_WITH(layout.validate(), Contains("cat_25 has raw ids"));
    layout = raw_layout();
    layout.raw_ids.pop_back();
    CHECK_THROWS_WITH(layout.validate(), Contains("need 26 raw-id flags"));
}

TEST_CASE("Criteo manifest: raw ids make version 2 with raw_ids per feature; round trip",
          "[data]") {
    CriteoManifest m;
    m.layout = raw_layout();
    m.lines_per_shard = 50;
    CriteoInputInfo in;
    in.path = "day_0";
    in.rows = 9;
    in.shards = {{"shard_0000_00000.bin", 9, 0xabc, 7}};
    m.inputs = {in};
    const std::string text = criteo_manifest_json(m);
    CHECK_THAT(text, Contains("\"version\": 2"));
    CHECK_THAT(text, Contains("{\"name\": \"cat_5\", \"num_embeddings\": 0, \"multi_hot\": 1, "
                              "\"raw_ids\": true}"));
    CHECK_THAT(text, Contains("{\"name\": \"cat_1\", \"num_embeddings\": 1000, \"multi_hot\": 1, "
                              "\"raw_ids\": false}"));
    CHECK_THAT(text, Contains(fmt::format("\"bytes\": {}", m.layout.record_bytes())));
    const CriteoManifest back = parse_criteo_manifest(text, "m.json");
    CHECK(back.layout.raw_ids == m.layout.raw_ids);
    CHECK(back.layout.num_embeddings == m.layout.num_embeddings);
    CHECK(back.layout.record_bytes() == m.layout.record_bytes());

    SECTION("without raw ids: version 1 and no raw_ids keys, as before") {
        CriteoManifest plain = m;
        plain.layout = CriteoRecordLayout::one_hot(1000);
        const std::string v1 = criteo_manifest_json(plain);
        CHECK_THAT(v1, Contains("\"version\": 1"));
        CHECK(v1.find("raw_ids") == std::string::npos);
        CHECK(parse_criteo_manifest(v1, "m.json").layout.raw_ids.empty());
    }
    // Inconsistent manifests: the reader must not guess the record layout.
    auto replaced = [&](const std::string& from, const std::string& to) {
        std::string t = text;
        const size_t at = t.find(from);
        REQUIRE(at != std::string::npos);
        return t.replace(at, from.size(), to);
    };
    SECTION("version 1 with raw_ids") {
        CHECK_THROWS_WITH(parse_criteo_manifest(replaced("\"version\": 2", "\"version\": 1"), "m"),
                          Contains("m: features[0]: has 'raw_ids' but the manifest is version 1"));
    }
    SECTION("version 2 with a feature lacking raw_ids") {
        CHECK_THROWS_WITH(
            parse_criteo_manifest(
                replaced("\"multi_hot\": 1, \"raw_ids\": false}", "\"multi_hot\": 1}"), "m"),
            Contains("m: features[1]: missing or not a scalar: 'raw_ids'"));
    }
    SECTION("version 2 with no raw feature") {
        std::string t = text;
        for (size_t at; (at = t.find("\"raw_ids\": true")) != std::string::npos;) {
            t.replace(at, 15, "\"raw_ids\": false");
        }
        CHECK_THROWS_WITH(parse_criteo_manifest(t, "m"),
                          Contains("version 2 but no feature has raw_ids: true"));
    }
    SECTION("a raw feature with rows") {
        CHECK_THROWS_WITH(parse_criteo_manifest(
                              replaced("\"num_embeddings\": 0", "\"num_embeddings\": 1000"), "m"),
                          Contains("m: criteo layout: cat_0 has raw ids"));
    }
    SECTION("a raw_ids value that is not a boolean") {
        CHECK_THROWS_WITH(
            parse_criteo_manifest(replaced("\"raw_ids\": true", "\"raw_ids\": 7"), "m"),
            Contains("'raw_ids' has a bad value '7'"));
    }
    SECTION("record bytes of the i32 layout") {
        const std::string bytes = fmt::format("\"bytes\": {}", m.layout.record_bytes());
        CHECK_THROWS_WITH(
            parse_criteo_manifest(
                replaced(bytes, fmt::format("\"bytes\": {}", m.layout.record_bytes() - 16)), "m"),
            Contains("does not match the features' layout"));
    }
    SECTION("a version this build does not read") {
        CHECK_THROWS_WITH(parse_criteo_manifest(replaced("\"version\": 2", "\"version\": 3"), "m"),
                          Contains("format version 3, this build reads 1 and 2"));
    }
}
