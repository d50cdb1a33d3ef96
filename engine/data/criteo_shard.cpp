#include "engine/data/criteo_shard.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cstring>

#include "engine/core/crc32.h"
#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/core/json_text.h"

namespace shardrec::data {
namespace {

constexpr char kMagic[8] = {'S', 'R', 'C', 'R', 'I', 'T', 'E', 'O'};

void put32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) {
        p[i] = static_cast<uint8_t>(v >> (8 * i));
    }
}

void put64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        p[i] = static_cast<uint8_t>(v >> (8 * i));
    }
}

uint32_t get32(const uint8_t* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
        v |= static_cast<uint32_t>(p[i]) << (8 * i);
    }
    return v;
}

uint64_t get64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
        v |= static_cast<uint64_t>(p[i]) << (8 * i);
    }
    return v;
}

}  // namespace

void encode_shard_header(const ShardHeader& h, uint8_t out[kShardHeaderBytes]) {
    std::memcpy(out, kMagic, 8);
    put32(out + 8, kShardVersion);
    put32(out + 12, h.record_bytes);
    put64(out + 16, h.rows);
    put64(out + 24, h.input_end_offset);
    put64(out + 32, h.input_end_line);
    put64(out + 40, h.skipped_lines);
    put64(out + 48, h.fingerprint);
    put32(out + 56, h.payload_crc32);
    put32(out + 60, crc32(out, 60));
}

ShardHeader parse_shard_header(const uint8_t* data, size_t size, const std::string& name) {
    SR_CHECK(size >= kShardHeaderBytes, "data shard {}: {} bytes, shorter than its {}-byte header",
             name, size, kShardHeaderBytes);
    SR_CHECK(std::memcmp(data, kMagic, 8) == 0, "data shard {}: not a shardrec Criteo shard", name);
    SR_CHECK(get32(data + 8) == kShardVersion, "data shard {}: format version {}, expected {}",
             name, get32(data + 8), kShardVersion);
    SR_CHECK(get32(data + 60) == crc32(data, 60), "data shard {}: header checksum mismatch", name);
    ShardHeader h;
    h.record_bytes = get32(data + 12);
    h.rows = get64(data + 16);
    h.input_end_offset = get64(data + 24);
    h.input_end_line = get64(data + 32);
    h.skipped_lines = get64(data + 40);
    h.fingerprint = get64(data + 48);
    h.payload_crc32 = get32(data + 56);
    return h;
}

ShardHeader check_shard(const uint8_t* data,
                        size_t size,
                        const std::string& name,
                        uint32_t expected_record_bytes,
                        bool verify_payload) {
    const ShardHeader h = parse_shard_header(data, size, name);
    SR_CHECK(h.record_bytes == expected_record_bytes,
             "data shard {}: records of {} bytes, the manifest says {}", name, h.record_bytes,
             expected_record_bytes);
    const uint64_t payload = size - kShardHeaderBytes;
    // rows * record_bytes must not wrap: compare by division.
    SR_CHECK(
        h.record_bytes > 0 && payload % h.record_bytes == 0 && payload / h.record_bytes == h.rows,
        "data shard {}: {} bytes, expected {} + {} rows x {} bytes (truncated or extended)", name,
        size, kShardHeaderBytes, h.rows, h.record_bytes);
    if (verify_payload) {
        const uint32_t crc = crc32(data + kShardHeaderBytes, payload);
        SR_CHECK(crc == h.payload_crc32,
                 "data shard {}: checksum mismatch (crc32 {:08x}, header says {:08x}): the file "
                 "is corrupted",
                 name, crc, h.payload_crc32);
        check_shard_labels(data, size, name, h.record_bytes);
    }
    return h;
}

void check_shard_labels(const uint8_t* data,
                        size_t size,
                        const std::string& name,
                        uint32_t record_bytes) {
    // Every record starts with its f32 label: a shorter record (a damaged header) has none.
    SR_CHECK(record_bytes >= sizeof(float),
             "data shard {}: records of {} bytes cannot hold the 4-byte label", name, record_bytes);
    const uint8_t* payload = data + kShardHeaderBytes;
    const size_t rows = (size - kShardHeaderBytes) / record_bytes;
    // One pass with no branch per record (the compiler may vectorise the gather); the slow search
    // for the first bad record only runs on a shard that has one.
    bool bad = false;
    for (size_t r = 0; r < rows; ++r) {
        float label;
        std::memcpy(&label, payload + r * record_bytes, 4);
        bad |= (label != 0.0f) & (label != 1.0f);  // NaN too
    }
    if (!bad) {
        return;
    }
    for (size_t r = 0; r < rows; ++r) {
        float label;
        std::memcpy(&label, payload + r * record_bytes, 4);
        SR_CHECK(label == 0.0f || label == 1.0f,
                 "data shard {}: record {} has label {}, expected 0 or 1 (not written by `shardrec "
                 "data criteo-preprocess`, or edited since)",
                 name, r, label);
    }
}

// ---- manifest ----

int64_t CriteoManifest::total_rows() const {
    int64_t n = 0;
    for (const auto& input : inputs) {
        n += input.rows;
    }
    return n;
}

std::string criteo_manifest_json(const CriteoManifest& m) {
    const CriteoRecordLayout& l = m.layout;
    const bool raw = l.any_raw();
    std::string out = "{\n  \"format\": \"shardrec-criteo-binary\",\n";
    out += fmt::format("  \"version\": {},\n", raw ? kManifestVersionRawIds : kShardVersion);
    const std::string sparse =
        raw ? fmt::format("{} ids, per feature in order: i32, or i64 where raw_ids",
                          l.ids_per_sample())
            : fmt::format("i32[{}], per feature in order", l.ids_per_sample());
    out += fmt::format(
        "  \"record\": {{\"bytes\": {}, \"label\": \"f32\", \"dense\": \"f32[{}] "
        "log(max(x,0)+1)\", \"sparse\": \"{}\"}},\n",
        l.record_bytes(), kCriteoNumDense, sparse);
    out += fmt::format("  \"multi_hot_seed\": {},\n", l.multi_hot_seed);
    out += fmt::format("  \"lines_per_shard\": {},\n", m.lines_per_shard);
    out += fmt::format("  \"total_rows\": {},\n  \"features\": [\n", m.total_rows());
    const auto names = criteo_sparse_feature_names();
    for (size_t t = 0; t < names.size(); ++t) {
        const std::string raw_key =
            raw ? fmt::format(", \"raw_ids\": {}", l.raw(static_cast<int>(t))) : "";
        out += fmt::format(
            "    {{\"name\": \"{}\", \"num_embeddings\": {}, \"multi_hot\": {}{}}}{}\n", names[t],
            l.num_embeddings[t], l.multi_hot[t], raw_key, t + 1 < names.size() ? "," : "");
    }
    out += "  ],\n  \"inputs\": [\n";
    for (size_t i = 0; i < m.inputs.size(); ++i) {
        const CriteoInputInfo& in = m.inputs[i];
        out += fmt::format(
            "    {{\"path\": {}, \"bytes\": {}, \"lines\": {}, \"rows\": {}, \"skipped_lines\": "
            "{}, "
            "\"shards\": [\n",
            json_quote(in.path), in.bytes, in.lines, in.rows, in.skipped_lines);
        for (size_t s = 0; s < in.shards.size(); ++s) {
            const CriteoShardInfo& sh = in.shards[s];
            out += fmt::format(
                "      {{\"file\": \"{}\", \"rows\": {}, \"fingerprint\": \"{:016x}\", \"crc32\": "
                "\"{:08x}\"}}{}\n",
                sh.file, sh.rows, sh.fingerprint, sh.crc32, s + 1 < in.shards.size() ? "," : "");
        }
        out += fmt::format("    ]}}{}\n", i + 1 < m.inputs.size() ? "," : "");
    }
    out += "  ]\n}\n";
    return out;
}

namespace {

// Manifest readers: every missing or ill-typed key is an error naming the manifest and the key.
template <typename T>
T manifest_get(const YAML::Node& node, const char* key, const std::string& where) {
    const YAML::Node v = node[key];
    SR_CHECK(v.IsDefined() && v.IsScalar(), "{}: missing or not a scalar: '{}'", where, key);
    try {
        return v.as<T>();
    } catch (const YAML::Exception&) {
        throw Error(fmt::format("{}: '{}' has a bad value '{}'", where, key, v.Scalar()));
    }
}

uint64_t manifest_hex(const YAML::Node& node, const char* key, const std::string& where) {
    const auto text = manifest_get<std::string>(node, key, where);
    size_t used = 0;
    uint64_t v = 0;
    try {
        v = std::stoull(text, &used, 16);
    } catch (const std::exception&) {
        used = 0;
    }
    SR_CHECK(!text.empty() && used == text.size(), "{}: '{}' is not hexadecimal: '{}'", where, key,
             text);
    return v;
}

YAML::Node manifest_list(const YAML::Node& node, const char* key, const std::string& where) {
    const YAML::Node v = node[key];
    SR_CHECK(v.IsDefined() && v.IsSequence(), "{}: missing or not a list: '{}'", where, key);
    return v;
}

}  // namespace

CriteoManifest parse_criteo_manifest(const std::string& text, const std::string& name) {
    YAML::Node loaded;
    try {
        loaded = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw Error(fmt::format("{}: not valid JSON: {}", name, e.what()));
    }
    const YAML::Node& root = loaded;
    SR_CHECK(root.IsMap(), "{}: not a shardrec Criteo manifest", name);
    SR_CHECK(manifest_get<std::string>(root, "format", name) == "shardrec-criteo-binary",
             "{}: not a shardrec Criteo manifest (format '{}')", name, root["format"].Scalar());
    const auto version = manifest_get<uint32_t>(root, "version", name);
    SR_CHECK(version == kShardVersion || version == kManifestVersionRawIds,
             "{}: format version {}, this build reads {} and {} (raw ids)", name, version,
             kShardVersion, kManifestVersionRawIds);
    CriteoManifest m;
    m.layout.multi_hot_seed = manifest_get<uint64_t>(root, "multi_hot_seed", name);
    m.lines_per_shard = manifest_get<int64_t>(root, "lines_per_shard", name);
    const YAML::Node features = manifest_list(root, "features", name);
    const auto expected = criteo_sparse_feature_names();
    SR_CHECK(features.size() == expected.size(), "{}: {} features, expected {}", name,
             features.size(), expected.size());
    for (size_t t = 0; t < features.size(); ++t) {
        const std::string where = fmt::format("{}: features[{}]", name, t);
        SR_CHECK(manifest_get<std::string>(features[t], "name", where) == expected[t],
                 "{}: expected feature '{}'", where, expected[t]);
        m.layout.num_embeddings.push_back(
            manifest_get<int64_t>(features[t], "num_embeddings", where));
        m.layout.multi_hot.push_back(manifest_get<int64_t>(features[t], "multi_hot", where));
        // Version 1 has no raw ids: a raw_ids key there is a manifest written by something else.
        if (version == kShardVersion) {
            SR_CHECK(!features[t]["raw_ids"].IsDefined(),
                     "{}: has 'raw_ids' but the manifest is version {} (raw ids need version {})",
                     where, kShardVersion, kManifestVersionRawIds);
        } else {
            m.layout.raw_ids.push_back(manifest_get<bool>(features[t], "raw_ids", where));
        }
    }
    SR_CHECK(version == kShardVersion || m.layout.any_raw(),
             "{}: version {} but no feature has raw_ids: true (a layout without raw ids is "
             "version {})",
             name, kManifestVersionRawIds, kShardVersion);
    try {
        m.layout.validate();
    } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", name, e.what()));
    }
    const YAML::Node record = root["record"];
    SR_CHECK(record.IsMap(), "{}: missing or not a map: 'record'", name);
    const auto record_bytes = manifest_get<int64_t>(record, "bytes", name + ": record");
    SR_CHECK(record_bytes == m.layout.record_bytes(),
             "{}: record.bytes {} does not match the features' layout ({} bytes)", name,
             record_bytes, m.layout.record_bytes());
    const YAML::Node inputs = manifest_list(root, "inputs", name);
    for (size_t i = 0; i < inputs.size(); ++i) {
        const std::string where = fmt::format("{}: inputs[{}]", name, i);
        CriteoInputInfo in;
        in.path = manifest_get<std::string>(inputs[i], "path", where);
        in.bytes = manifest_get<int64_t>(inputs[i], "bytes", where);
        in.lines = manifest_get<int64_t>(inputs[i], "lines", where);
        in.rows = manifest_get<int64_t>(inputs[i], "rows", where);
        in.skipped_lines = manifest_get<int64_t>(inputs[i], "skipped_lines", where);
        const YAML::Node shards = manifest_list(inputs[i], "shards", where);
        int64_t rows = 0;
        for (size_t s = 0; s < shards.size(); ++s) {
            const std::string at = fmt::format("{}.shards[{}]", where, s);
            CriteoShardInfo sh;
            sh.file = manifest_get<std::string>(shards[s], "file", at);
            SR_CHECK(!sh.file.empty() && sh.file.find('/') == std::string::npos,
                     "{}: bad shard file name '{}'", at, sh.file);
            sh.rows = manifest_get<int64_t>(shards[s], "rows", at);
            SR_CHECK(sh.rows >= 0, "{}: negative rows", at);
            sh.fingerprint = manifest_hex(shards[s], "fingerprint", at);
            sh.crc32 = static_cast<uint32_t>(manifest_hex(shards[s], "crc32", at));
            rows += sh.rows;
            in.shards.push_back(sh);
        }
        SR_CHECK(rows == in.rows, "{}: rows {} but its shards hold {}", where, in.rows, rows);
        m.inputs.push_back(in);
    }
    return m;
}

CriteoManifest read_criteo_manifest(const std::string& dir) {
    struct stat st {};

    SR_CHECK(::stat(dir.c_str(), &st) != 0 || S_ISDIR(st.st_mode),
             "criteo data '{}' is not a directory: give the directory written by `shardrec data "
             "criteo-preprocess --out`",
             dir);
    const std::string path = dir + "/" + kCriteoManifestName;
    const std::string problem = input_file_problem(path);
    SR_CHECK(problem.empty(),
             "the Criteo manifest '{}' {} (is {} a directory written by `shardrec data "
             "criteo-preprocess`?)",
             path, problem, dir);
    return parse_criteo_manifest(read_input_file(path, "the Criteo manifest"), path);
}

}  // namespace shardrec::data
