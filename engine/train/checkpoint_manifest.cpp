// manifest.yaml: written with yaml-cpp's emitter, read back with checks that name the file and key.
#include "engine/train/checkpoint_manifest.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/crc32.h"
#include "engine/core/error.h"
#include "engine/train/quantized_model.h"

namespace shardrec::train {
namespace {

constexpr const char* kChecksumKey = "manifest_crc32:";

std::string crc_text(uint32_t crc) {
    return fmt::format("0x{:08x}", crc);
}

YAML::Node flow_list(const std::vector<int64_t>& v) {
    YAML::Node n(YAML::NodeType::Sequence);
    for (int64_t x : v)
        n.push_back(x);
    n.SetStyle(YAML::EmitterStyle::Flow);
    return n;
}

YAML::Node tensor_node(const CheckpointTensor& t) {
    YAML::Node n;
    n["name"] = t.name;
    n["dtype"] = dtype_name(t.dtype);
    n["shape"] = flow_list(t.shape);
    n["file"] = t.file;
    n.SetStyle(YAML::EmitterStyle::Flow);
    return n;
}

YAML::Node shard_node(const CheckpointShard& s) {
    YAML::Node n;
    n["rank"] = s.rank;
    n["offsets"] = flow_list({s.row_offset, s.col_offset});
    n["sizes"] = flow_list({s.rows, s.cols});
    n["optimizer_step"] = s.optimizer_step;
    if (s.stored_rows >= 0) {
        n["stored_rows"] = s.stored_rows;
        n["row_ids"] = s.row_ids;
    }
    YAML::Node files(YAML::NodeType::Sequence);
    for (const auto& f : s.files)
        files.push_back(f);
    n["files"] = files;
    n.SetStyle(YAML::EmitterStyle::Flow);
    return n;
}

YAML::Node file_node(const CheckpointFile& f) {
    YAML::Node n;
    n["path"] = f.path;
    n["bytes"] = f.bytes;
    n["crc32"] = crc_text(f.crc32);
    n.SetStyle(YAML::EmitterStyle::Flow);
    return n;
}

// Reads a required key; errors name the source, the entry and the key.
class Reader {
public:
    explicit Reader(std::string source) : source_(std::move(source)) {}

    YAML::Node at(const YAML::Node& node, const char* key, const std::string& where) const {
        const YAML::Node v = node[key];
        SR_CHECK(v.IsDefined() && !v.IsNull(), "{}: {}{} is missing (not a shardrec checkpoint?)",
                 source_, where.empty() ? "" : where + ".", key);
        return v;
    }

    template <typename T>
    T get(const YAML::Node& node, const char* key, const std::string& where) const {
        const YAML::Node v = at(node, key, where);
        try {
            return v.as<T>();
        } catch (const YAML::Exception&) {
            SR_CHECK(false, "{}:{}: {}{}: bad value '{}'", source_, v.Mark().line + 1,
                     where.empty() ? "" : where + ".", key, YAML::Dump(v));
        }
        return T{};
    }

    Shape shape(const YAML::Node& node, const char* key, const std::string& where) const {
        Shape s = get<std::vector<int64_t>>(node, key, where);
        for (const int64_t d : s) {
            SR_CHECK(d >= 0, "{}: {}.{}: {} is negative", source_, where, key, d);
        }
        return s;
    }

    // A file name inside the checkpoint: relative and never above it.
    std::string file_name(const YAML::Node& node, const char* key, const std::string& where) const {
        return inside(get<std::string>(node, key, where), where + "." + key);
    }

    std::string inside(const std::string& name, const std::string& where) const {
        const std::filesystem::path p(name);
        bool escapes = name.empty() || p.is_absolute();
        for (const auto& part : p)
            escapes = escapes || part == "..";
        SR_CHECK(!escapes, "{}: {}: '{}' is not a file inside the checkpoint", source_, where,
                 name);
        return name;
    }

    CheckpointTensor tensor(const YAML::Node& n, const std::string& where) const {
        CheckpointTensor t;
        t.name = get<std::string>(n, "name", where);
        t.dtype = dtype_from_name(get<std::string>(n, "dtype", where));
        t.shape = shape(n, "shape", where);
        t.file = file_name(n, "file", where);
        return t;
    }

    CheckpointShard shard(const YAML::Node& n, const std::string& where) const {
        CheckpointShard s;
        s.rank = get<int>(n, "rank", where);
        const Shape offsets = shape(n, "offsets", where), sizes = shape(n, "sizes", where);
        SR_CHECK(offsets.size() == 2 && sizes.size() == 2,
                 "{}: {}: offsets and sizes need 2 values", source_, where);
        s.row_offset = offsets[0];
        s.col_offset = offsets[1];
        s.rows = sizes[0];
        s.cols = sizes[1];
        s.optimizer_step = get<int64_t>(n, "optimizer_step", where);
        SR_CHECK(s.rank >= 0, "{}: {}: rank {} is negative", source_, where, s.rank);
        s.files = get<std::vector<std::string>>(n, "files", where);
        for (const std::string& f : s.files)
            inside(f, where + ".files[]");
        if (n["stored_rows"]) {
            s.stored_rows = get<int64_t>(n, "stored_rows", where);
            SR_CHECK(s.stored_rows >= 0 && s.stored_rows <= s.rows,
                     "{}: {}: stored_rows {} outside [0, {}]", source_, where, s.stored_rows,
                     s.rows);
            s.row_ids = file_name(n, "row_ids", where);
        }
        return s;
    }

    CheckpointFile file(const YAML::Node& n, const std::string& where) const {
        CheckpointFile f;
        f.path = file_name(n, "path", where);
        f.bytes = get<int64_t>(n, "bytes", where);
        SR_CHECK(f.bytes >= 0, "{}: {}[{}].bytes: {} is negative", source_, where, f.path, f.bytes);
        const std::string crc = get<std::string>(n, "crc32", where);
        const bool hex = crc.size() == 10 && crc.compare(0, 2, "0x") == 0 &&
                         crc.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string::npos;
        SR_CHECK(hex, "{}: {}[{}].crc32: '{}' is not 0x and 8 hex digits", source_, where, f.path,
                 crc);
        f.crc32 = static_cast<uint32_t>(std::stoul(crc.substr(2), nullptr, 16));
        return f;
    }

    const std::string& source() const { return source_; }

private:
    std::string source_;
};

}  // namespace

const CheckpointTable* CheckpointManifest::table(const std::string& name) const {
    for (const auto& t : tables) {
        if (t.name == name)
            return &t;
    }
    return nullptr;
}

const CheckpointFile& CheckpointManifest::file(const std::string& path) const {
    for (const auto& f : files) {
        if (f.path == path)
            return f;
    }
    SR_CHECK(false, "checkpoint manifest: file '{}' is used but not listed under files", path);
    return files.front();
}

int64_t CheckpointManifest::total_bytes() const {
    int64_t n = 0;
    for (const auto& f : files)
        n += f.bytes;
    return n;
}

std::vector<std::string> sparse_state_names(const std::string& sparse_optimizer) {
    if (sparse_optimizer == "adagrad" || sparse_optimizer == "rowwise_adagrad")
        return {"momentum1"};
    if (sparse_optimizer == "adam")
        return {"exp_avg", "exp_avg_sq"};
    SR_CHECK(sparse_optimizer == "sgd", "unknown sparse optimizer '{}'", sparse_optimizer);
    return {};
}

std::string manifest_to_yaml(const CheckpointManifest& m) {
    YAML::Node root;
    root["format"] = kCheckpointFormat;
    root["version"] = kCheckpointVersion;
    root["run_id"] = m.run_id;
    root["step"] = m.step;
    root["samples"] = m.samples;
    root["seed"] = m.seed;
    root["world_size"] = m.world_size;
    root["global_batch_size"] = m.global_batch_size;
    YAML::Node model;
    model["type"] = m.model_type;
    model["sparse_optimizer"] = m.sparse_optimizer;
    YAML::Node state(YAML::NodeType::Sequence);
    for (const auto& s : m.sparse_state)
        state.push_back(s);
    model["sparse_state"] = state;
    model["dense_optimizer"] = m.dense_optimizer;
    if (m.initial_accumulator_value != 0)
        model["initial_accumulator_value"] = m.initial_accumulator_value;
    model.SetStyle(YAML::EmitterStyle::Flow);
    root["model"] = model;
    YAML::Node tables(YAML::NodeType::Sequence);
    for (const auto& t : m.tables) {
        YAML::Node n;
        n["name"] = t.name;
        n["num_embeddings"] = t.num_embeddings;
        n["embedding_dim"] = t.embedding_dim;
        n["dtype"] = dtype_name(t.dtype);
        n["sharding_type"] = t.sharding_type;
        YAML::Node shards(YAML::NodeType::Sequence);
        for (const auto& s : t.shards)
            shards.push_back(shard_node(s));
        n["shards"] = shards;
        tables.push_back(n);
    }
    root["tables"] = tables;
    for (const auto& [key, list] :
         {std::pair<const char*, const std::vector<CheckpointTensor>*>{"dense", &m.dense},
          {"dense_optimizer", &m.dense_optimizer_state}}) {
        YAML::Node seq(YAML::NodeType::Sequence);
        for (const auto& t : *list)
            seq.push_back(tensor_node(t));
        root[key] = seq;
    }
    YAML::Node files(YAML::NodeType::Sequence);
    for (const auto& f : m.files)
        files.push_back(file_node(f));
    root["files"] = files;
    YAML::Emitter out;
    out << root;
    const std::string text = std::string(out.c_str()) + "\n";
    return text + fmt::format("{} {}\n", kChecksumKey, crc_text(crc32(text.data(), text.size())));
}

namespace {

// The manifest's facts from its checked text; a YAML node of the wrong kind anywhere is an Error.
CheckpointManifest manifest_from_text(const std::string& text,
                                      const std::string& source,
                                      bool has_checksum) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        SR_CHECK(false, "{}: not valid YAML: {}", source, e.what());
    }
    const Reader r(source);
    const std::string format =
        root.IsMap() && root["format"] ? root["format"].as<std::string>("") : "";
    SR_CHECK(
        format == kCheckpointFormat,
        "{}: not a shardrec checkpoint manifest (format: {} expected){}", source, kCheckpointFormat,
        format == kQuantizedModelFormat ? "; it is a quantized model: use `eval --model`" : "");
    CheckpointManifest m;
    m.version = r.get<int>(root, "version", "");
    SR_CHECK(m.version == 1 || m.version == kCheckpointVersion,
             "{}: checkpoint version {}, this build reads 1 and {}", source, m.version,
             kCheckpointVersion);
    SR_CHECK(m.version == 1 || has_checksum,
             "{}: the {} line is missing (the manifest was edited or cut short)", source,
             kChecksumKey);
    m.step = r.get<int64_t>(root, "step", "");
    m.seed = r.get<int64_t>(root, "seed", "");
    m.world_size = r.get<int>(root, "world_size", "");
    m.global_batch_size = r.get<int64_t>(root, "global_batch_size", "");
    SR_CHECK(m.step >= 0 && m.world_size >= 1 && m.global_batch_size >= 1,
             "{}: step {}, world_size {} and global_batch_size {} must be >= 0, 1 and 1", source,
             m.step, m.world_size, m.global_batch_size);
    if (m.version == 1) {
        m.samples = m.step * m.global_batch_size;
    } else {
        m.run_id = r.get<std::string>(root, "run_id", "");
        // new_run_id writes printable ASCII only; other bytes (invalid UTF-8 among them) would
        // not survive the YAML writer unchanged.
        SR_CHECK(std::all_of(m.run_id.begin(), m.run_id.end(),
                             [](char c) { return c > ' ' && c < 0x7f; }),
                 "{}: run_id holds a byte outside printable ASCII (the manifest was edited or "
                 "damaged)",
                 source);
        m.samples = r.get<int64_t>(root, "samples", "");
        SR_CHECK(m.samples >= 0, "{}: samples {} must be >= 0", source, m.samples);
    }
    const YAML::Node model = r.at(root, "model", "");
    m.model_type = r.get<std::string>(model, "type", "model");
    m.sparse_optimizer = r.get<std::string>(model, "sparse_optimizer", "model");
    if (model["sparse_state"])
        m.sparse_state = r.get<std::vector<std::string>>(model, "sparse_state", "model");
    m.dense_optimizer = r.get<std::string>(model, "dense_optimizer", "model");
    if (model["initial_accumulator_value"])
        m.initial_accumulator_value = r.get<double>(model, "initial_accumulator_value", "model");
    for (const YAML::Node& n : r.at(root, "tables", "")) {
        CheckpointTable t;
        t.name = r.get<std::string>(n, "name", "tables[]");
        const std::string where = "tables[" + t.name + "]";
        t.num_embeddings = r.get<int64_t>(n, "num_embeddings", where);
        t.embedding_dim = r.get<int64_t>(n, "embedding_dim", where);
        t.dtype = dtype_from_name(r.get<std::string>(n, "dtype", where));
        t.sharding_type = r.get<std::string>(n, "sharding_type", where);
        if (n["shards"]) {
            for (const YAML::Node& s : n["shards"]) {
                t.shards.push_back(r.shard(s, where + ".shards[]"));
                SR_CHECK(t.shards.back().rank < m.world_size,
                         "{}: {}: a shard of rank {} in a checkpoint of {} rank(s)", source, where,
                         t.shards.back().rank, m.world_size);
            }
        }
        m.tables.push_back(std::move(t));
    }
    for (const YAML::Node& n : r.at(root, "dense", ""))
        m.dense.push_back(r.tensor(n, "dense[]"));
    for (const YAML::Node& n : r.at(root, "dense_optimizer", ""))
        m.dense_optimizer_state.push_back(r.tensor(n, "dense_optimizer[]"));
    for (const YAML::Node& n : r.at(root, "files", ""))
        m.files.push_back(r.file(n, "files[]"));
    return m;
}

}  // namespace

CheckpointManifest parse_manifest(const std::string& text, const std::string& source) {
    // The checksum line is checked on the bytes before it, before anything is parsed.
    const size_t at = text.rfind(std::string("\n") + kChecksumKey);
    const bool has_checksum = at != std::string::npos || text.rfind(kChecksumKey, 0) == 0;
    if (has_checksum) {
        const size_t line = at == std::string::npos ? 0 : at + 1;
        const std::string value = text.substr(line + std::strlen(kChecksumKey));
        const uint32_t found = crc32(text.data(), line);
        uint32_t expected = 0;
        const bool parsed = std::sscanf(value.c_str(), " 0x%8x", &expected) == 1;
        SR_CHECK(parsed && expected == found,
                 "{}: the manifest was edited or is damaged: its {} line says {}, its text has "
                 "CRC-32 {}",
                 source, kChecksumKey, parsed ? crc_text(expected) : "nothing readable",
                 crc_text(found));
    }
    try {
        return manifest_from_text(text, source, has_checksum);
    } catch (const YAML::Exception& e) {
        SR_CHECK(false, "{}: not a shardrec checkpoint manifest: {}", source, e.what());
    }
    return {};
}

CheckpointManifest read_manifest(const std::string& dir) {
    const std::string path = (std::filesystem::path(dir) / kManifestName).string();
    std::ifstream in(path, std::ios::binary);
    SR_CHECK(in.good(), "checkpoint {}: cannot open {} (missing file: not a complete checkpoint)",
             dir, path);
    std::stringstream text;
    text << in.rdbuf();
    return parse_manifest(text.str(), path);
}

std::string shards_to_yaml(const std::vector<std::pair<std::string, CheckpointShard>>& shards,
                           const std::vector<CheckpointFile>& files) {
    YAML::Node root;
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const auto& [table, s] : shards) {
        YAML::Node n = shard_node(s);
        n["table"] = table;
        seq.push_back(n);
    }
    root["shards"] = seq;
    YAML::Node fs(YAML::NodeType::Sequence);
    for (const auto& f : files)
        fs.push_back(file_node(f));
    root["files"] = fs;
    YAML::Emitter out;
    out << root;
    return out.c_str();
}

void append_shards_from_yaml(const std::string& text, CheckpointManifest& m) {
    const Reader r("<shards of one rank>");
    const YAML::Node root = YAML::Load(text);
    for (const YAML::Node& n : root["shards"]) {
        const std::string table = r.get<std::string>(n, "table", "shards[]");
        auto it = std::find_if(m.tables.begin(), m.tables.end(),
                               [&](const CheckpointTable& t) { return t.name == table; });
        SR_CHECK(it != m.tables.end(), "checkpoint: a rank saved a shard of unknown table '{}'",
                 table);
        it->shards.push_back(r.shard(n, "shards[]"));
    }
    for (const YAML::Node& n : root["files"])
        m.files.push_back(r.file(n, "files[]"));
}

}  // namespace shardrec::train
