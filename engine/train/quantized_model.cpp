// The quantized model directory: written from a checkpoint's assembled tables, read back with
// every checksum checked.
#include "engine/train/quantized_model.h"

#include <yaml-cpp/yaml.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/crc32.h"
#include "engine/core/durable_file.h"
#include "engine/core/error.h"
#include "engine/core/mapped_file.h"
#include "engine/core/stream.h"
#include "engine/modules/model.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"

namespace shardrec::train {
namespace fs = std::filesystem;

namespace {

constexpr int kVersion = 1;
constexpr const char* kChecksumKey = "manifest_crc32:";

std::string crc_text(uint32_t crc) {
    return fmt::format("0x{:08x}", crc);
}

std::string read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    SR_CHECK(in.good(), "cannot open '{}'", path.string());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

Tensor read_tensor(const fs::path& path, const Shape& shape, DType dtype) {
    Tensor out = Tensor::empty(shape, dtype);
    std::ifstream in(path, std::ios::binary);
    in.read(static_cast<char*>(out.data_ptr()), static_cast<std::streamsize>(out.nbytes()));
    SR_CHECK(in.gcount() == static_cast<std::streamsize>(out.nbytes()), "'{}' is shorter than {}",
             path.string(), out.str());
    return out;
}

std::string manifest_text(const QuantizedModel& m) {
    YAML::Node root;
    root["format"] = kQuantizedModelFormat;
    root["version"] = kVersion;
    root["source_checkpoint"] = m.source_checkpoint;
    root["source_run_id"] = m.source_run_id;
    root["step"] = m.step;
    YAML::Node model;
    model["type"] = m.model_type;
    model.SetStyle(YAML::EmitterStyle::Flow);
    root["model"] = model;
    root["weights"] = kernels::quant_type_name(m.weights);
    root["row_alignment"] = kernels::kQuantRowAlignment;
    YAML::Node tables(YAML::NodeType::Sequence);
    for (const QuantizedTable& t : m.tables) {
        YAML::Node n;
        n["name"] = t.name;
        n["type"] = kernels::quant_type_name(t.type);
        n["num_embeddings"] = t.num_embeddings;
        n["embedding_dim"] = t.embedding_dim;
        n["row_bytes"] = kernels::quant_row_bytes(t.type, t.embedding_dim);
        n["file"] = t.file;
        n.SetStyle(YAML::EmitterStyle::Flow);
        tables.push_back(n);
    }
    root["tables"] = tables;
    YAML::Node dense(YAML::NodeType::Sequence);
    for (const CheckpointTensor& t : m.dense) {
        YAML::Node n;
        n["name"] = t.name;
        n["dtype"] = dtype_name(t.dtype);
        YAML::Node shape(YAML::NodeType::Sequence);
        for (int64_t d : t.shape)
            shape.push_back(d);
        n["shape"] = shape;
        n["file"] = t.file;
        n.SetStyle(YAML::EmitterStyle::Flow);
        dense.push_back(n);
    }
    root["dense"] = dense;
    if (!m.managed_collision.empty()) {
        YAML::Node mc(YAML::NodeType::Sequence);
        for (const QuantizedRemapState& r : m.managed_collision) {
            YAML::Node n;
            n["table"] = r.table;
            n["bucket"] = r.bucket;
            n["elements"] = r.elements;
            n["file"] = r.file;
            n.SetStyle(YAML::EmitterStyle::Flow);
            mc.push_back(n);
        }
        root["managed_collision"] = mc;
    }
    YAML::Node files(YAML::NodeType::Sequence);
    for (const CheckpointFile& f : m.files) {
        YAML::Node n;
        n["path"] = f.path;
        n["bytes"] = f.bytes;
        n["crc32"] = crc_text(f.crc32);
        n.SetStyle(YAML::EmitterStyle::Flow);
        files.push_back(n);
    }
    root["files"] = files;
    YAML::Emitter out;
    out << root;
    const std::string text = std::string(out.c_str()) + "\n";
    return text + fmt::format("{} {}\n", kChecksumKey, crc_text(crc32(text.data(), text.size())));
}

// Typed reads of the manifest that name the file and the key.
class Reader {
public:
    explicit Reader(std::string source) : source_(std::move(source)) {}

    template <typename T>
    T get(const YAML::Node& node, const std::string& key, const std::string& where) const {
        const YAML::Node v = node[key];
        SR_CHECK(v.IsDefined(), "{}: {}{}: missing", source_, where.empty() ? "" : where + ".",
                 key);
        try {
            return v.as<T>();
        } catch (const YAML::Exception&) {
            SR_CHECK(false, "{}: {}{}: unreadable value", source_, where.empty() ? "" : where + ".",
                     key);
        }
        return T{};
    }

    std::string file(const YAML::Node& node, const std::string& where) const {
        const std::string name = get<std::string>(node, "file", where);
        bool escapes = name.empty() || fs::path(name).is_absolute();
        for (const auto& part : fs::path(name))
            escapes = escapes || part == "..";
        SR_CHECK(!escapes, "{}: {}.file: '{}' is not a file inside the model directory", source_,
                 where, name);
        return name;
    }

private:
    std::string source_;
};

}  // namespace

const QuantizedTable* QuantizedModel::table(const std::string& name) const {
    for (const QuantizedTable& t : tables) {
        if (t.name == name)
            return &t;
    }
    return nullptr;
}

int64_t QuantizedModel::table_bytes() const {
    int64_t total = 0;
    for (const QuantizedTable& t : tables)
        total += t.num_embeddings * kernels::quant_row_bytes(t.type, t.embedding_dim);
    return total;
}

int64_t QuantizedModel::dense_bytes() const {
    int64_t total = 0;
    for (const CheckpointTensor& t : dense)
        total += shape_numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype));
    return total;
}

std::map<std::string, kernels::QuantType> parse_table_types(const std::string& spec) {
    std::map<std::string, kernels::QuantType> out;
    std::istringstream in(spec);
    std::string entry;
    while (std::getline(in, entry, ',')) {
        const size_t eq = entry.find('=');
        SR_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < entry.size(),
                 "--tables: '{}' is not TABLE=TYPE (e.g. t0=int4)", entry);
        const std::string name = entry.substr(0, eq);
        SR_CHECK(out.count(name) == 0, "--tables: table '{}' is listed twice", name);
        out[name] = kernels::quant_type_from_name(entry.substr(eq + 1));
    }
    return out;
}

QuantizedModel quantize_checkpoint(const std::string& checkpoint,
                                   const std::string& out_dir,
                                   kernels::QuantType weights,
                                   const std::map<std::string, kernels::QuantType>& table_types) {
    const std::string dir = resolve_checkpoint(checkpoint);
    const CheckpointManifest m = read_manifest(dir);
    const std::string problem = verify_checkpoint_files(dir, m);
    SR_CHECK(problem.empty(), "{}", problem);
    for (const auto& [name, type] : table_types) {
        SR_CHECK(m.table(name) != nullptr, "--tables: checkpoint {} has no table '{}' (it has {})",
                 dir, name, [&] {
                     std::string names;
                     for (const auto& t : m.tables)
                         names += (names.empty() ? "" : ", ") + t.name;
                     return names;
                 }());
    }
    SR_CHECK(!fs::exists(out_dir),
             "ckpt quantize: '{}' already exists; remove it or choose another --out", out_dir);
    const fs::path tmp = out_dir + ".tmp";
    fs::remove_all(tmp);
    fs::create_directories(tmp / "tables");
    fs::create_directories(tmp / "dense");
    QuantizedModel q;
    q.dir = out_dir;
    q.source_checkpoint = fs::absolute(dir).lexically_normal().string();
    q.source_run_id = m.run_id;
    q.step = m.step;
    q.model_type = m.model_type;
    q.weights = weights;
    auto add_file = [&](const std::string& rel, const void* data, size_t bytes) {
        write_file_atomically((tmp / rel).string(),
                              std::string(static_cast<const char*>(data), bytes));
        q.files.push_back(CheckpointFile{rel, static_cast<int64_t>(bytes), crc32(data, bytes)});
    };
    for (const CheckpointTable& t : m.tables) {
        const auto it = table_types.find(t.name);
        QuantizedTable qt;
        qt.name = t.name;
        qt.type = it != table_types.end() ? it->second : weights;
        qt.num_embeddings = t.num_embeddings;
        qt.embedding_dim = t.embedding_dim;
        qt.file = fmt::format("tables/{}.{}.bin", t.name, kernels::quant_type_name(qt.type));
        // Block by block: a table larger than memory (key_value) quantizes in bounded memory.
        const int64_t row_bytes = kernels::quant_row_bytes(qt.type, t.embedding_dim);
        DurableFileWriter file((tmp / qt.file).string());
        uint32_t crc = 0;
        Tensor codes;
        for_each_table_block(dir, m, t, [&](int64_t, const Tensor& block) {
            const int64_t n = block.shape()[0];
            if (!codes.defined() || codes.numel() != n * row_bytes)
                codes = Tensor::empty({n * row_bytes}, DType::kU8);
            kernels::quantize_rows(rows_as_f32(block), qt.type, codes, Stream::cpu());
            crc = crc32(codes.data_ptr(), codes.nbytes(), crc);
            file.write(codes.data_ptr(), codes.nbytes());
        });
        file.commit();
        q.files.push_back(CheckpointFile{qt.file, file.bytes(), crc});
        q.tables.push_back(qt);
    }
    for (const CheckpointTensor& d : m.dense) {
        const Tensor value = read_tensor(fs::path(dir) / d.file, d.shape, d.dtype);
        CheckpointTensor saved = d;
        saved.file = "dense/" + d.name + ".bin";
        add_file(saved.file, value.data_ptr(), value.nbytes());
        q.dense.push_back(saved);
    }
    for (const CheckpointTable& t : m.tables) {
        for (int64_t b = 0;; ++b) {  // the table's buckets, 0 .. K - 1
            const std::string file = managed_collision_file(t.name, b);
            const CheckpointFile* f = nullptr;
            for (const CheckpointFile& c : m.files)
                f = c.path == file ? &c : f;
            if (f == nullptr)
                break;
            if (q.managed_collision.empty())
                fs::create_directories(tmp / "managed_collision");
            const Tensor state = read_tensor(fs::path(dir) / file, {f->bytes / 8}, DType::kI64);
            add_file(file, state.data_ptr(), state.nbytes());
            q.managed_collision.push_back(QuantizedRemapState{t.name, b, state.numel(), file});
        }
    }
    write_file_atomically((tmp / "manifest.yaml").string(), manifest_text(q));
    sync_directory(tmp.string());
    fs::rename(tmp, out_dir);
    sync_directory(fs::absolute(out_dir).parent_path().string());
    return q;
}

QuantizedModel read_quantized_model(const std::string& dir) {
    const fs::path path = fs::path(dir) / "manifest.yaml";
    SR_CHECK(fs::exists(path), "'{}' is not a quantized model directory (no manifest.yaml)", dir);
    const std::string source = path.string();
    const std::string text = read_bytes(path);
    const size_t line = text.rfind(kChecksumKey);
    SR_CHECK(line != std::string::npos && (line == 0 || text[line - 1] == '\n'),
             "{}: no {} line at its end", source, kChecksumKey);
    const std::string want = crc_text(crc32(text.data(), line));
    const std::string found = text.substr(line + std::strlen(kChecksumKey));
    SR_CHECK(found.find(want) != std::string::npos,
             "{}: its checksum does not match its text (edited or damaged): {} expected{}", source,
             want, found.substr(0, found.find('\n')));
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        SR_CHECK(false, "{}: not YAML: {}", source, e.what());
    }
    const Reader r(source);
    const std::string format = r.get<std::string>(root, "format", "");
    SR_CHECK(format == kQuantizedModelFormat, "{}: format is not {}{}", source,
             kQuantizedModelFormat,
             format == kCheckpointFormat ? " (a training checkpoint: make a model of it with "
                                           "`shardrec ckpt quantize`)"
                                         : "");
    const int version = r.get<int>(root, "version", "");
    SR_CHECK(version == kVersion, "{}: version {} (this shardrec reads {})", source, version,
             kVersion);
    QuantizedModel q;
    q.dir = dir;
    q.source_checkpoint = r.get<std::string>(root, "source_checkpoint", "");
    if (root["source_run_id"])
        q.source_run_id = r.get<std::string>(root, "source_run_id", "");
    q.step = r.get<int64_t>(root, "step", "");
    q.model_type = r.get<std::string>(root["model"], "type", "model");
    q.weights = kernels::quant_type_from_name(r.get<std::string>(root, "weights", ""));
    for (size_t i = 0; i < root["tables"].size(); ++i) {
        const YAML::Node n = root["tables"][i];
        const std::string where = fmt::format("tables[{}]", i);
        QuantizedTable t;
        t.name = r.get<std::string>(n, "name", where);
        t.type = kernels::quant_type_from_name(r.get<std::string>(n, "type", where));
        t.num_embeddings = r.get<int64_t>(n, "num_embeddings", where);
        t.embedding_dim = r.get<int64_t>(n, "embedding_dim", where);
        t.file = r.file(n, where);
        const int64_t row_bytes = r.get<int64_t>(n, "row_bytes", where);
        SR_CHECK(row_bytes == kernels::quant_row_bytes(t.type, t.embedding_dim),
                 "{}: {} (table {}): row_bytes {}, but {} dim {} rows take {}", source, where,
                 t.name, row_bytes, kernels::quant_type_name(t.type), t.embedding_dim,
                 kernels::quant_row_bytes(t.type, t.embedding_dim));
        q.tables.push_back(t);
    }
    for (size_t i = 0; i < root["dense"].size(); ++i) {
        const YAML::Node n = root["dense"][i];
        const std::string where = fmt::format("dense[{}]", i);
        CheckpointTensor t;
        t.name = r.get<std::string>(n, "name", where);
        t.dtype = dtype_from_name(r.get<std::string>(n, "dtype", where));
        t.shape = r.get<std::vector<int64_t>>(n, "shape", where);
        t.file = r.file(n, where);
        q.dense.push_back(t);
    }
    for (size_t i = 0; i < root["managed_collision"].size(); ++i) {
        const YAML::Node n = root["managed_collision"][i];
        const std::string where = fmt::format("managed_collision[{}]", i);
        QuantizedRemapState m;
        m.table = r.get<std::string>(n, "table", where);
        m.bucket = r.get<int64_t>(n, "bucket", where);
        m.elements = r.get<int64_t>(n, "elements", where);
        m.file = r.file(n, where);
        q.managed_collision.push_back(m);
    }
    CheckpointManifest files;
    for (size_t i = 0; i < root["files"].size(); ++i) {
        const YAML::Node n = root["files"][i];
        const std::string where = fmt::format("files[{}]", i);
        CheckpointFile f;
        f.path = r.get<std::string>(n, "path", where);
        f.bytes = r.get<int64_t>(n, "bytes", where);
        f.crc32 =
            static_cast<uint32_t>(std::stoul(r.get<std::string>(n, "crc32", where), nullptr, 16));
        files.files.push_back(f);
    }
    q.files = files.files;
    for (const QuantizedTable& t : q.tables) {
        const CheckpointFile& f = files.file(t.file);
        SR_CHECK(f.bytes == t.num_embeddings * kernels::quant_row_bytes(t.type, t.embedding_dim),
                 "{}: table {}: {} holds {} bytes, not {} rows of {}", source, t.name, t.file,
                 f.bytes, t.num_embeddings, kernels::quant_row_bytes(t.type, t.embedding_dim));
    }
    for (const CheckpointTensor& t : q.dense)
        files.file(t.file);  // listed, so its checksum is checked
    for (const QuantizedRemapState& m : q.managed_collision) {
        const CheckpointFile& f = files.file(m.file);
        SR_CHECK(f.bytes == m.elements * 8,
                 "{}: managed_collision {}: {} holds {} bytes, not {} i64", source, m.table, m.file,
                 f.bytes, m.elements);
    }
    const std::string problem = verify_checkpoint_files(dir, files);
    SR_CHECK(problem.empty(), "quantized model {}", problem);
    return q;
}

Tensor read_quantized_table(const QuantizedModel& model, const QuantizedTable& table) {
    return read_quantized_rows(model, table, 0, table.num_embeddings);
}

Tensor read_quantized_rows(const QuantizedModel& model,
                           const QuantizedTable& table,
                           int64_t row_offset,
                           int64_t rows) {
    SR_CHECK(row_offset >= 0 && rows >= 0 && row_offset + rows <= table.num_embeddings,
             "quantized model {}: rows [{}, {}) of table '{}', which has {}", model.dir, row_offset,
             row_offset + rows, table.name, table.num_embeddings);
    const int64_t row_bytes = kernels::quant_row_bytes(table.type, table.embedding_dim);
    return map_file_region((fs::path(model.dir) / table.file).string(), row_offset * row_bytes,
                           rows * row_bytes);
}

Tensor read_quantized_dense(const QuantizedModel& model, const CheckpointTensor& tensor) {
    return read_tensor(fs::path(model.dir) / tensor.file, tensor.shape, tensor.dtype);
}

}  // namespace shardrec::train

namespace shardrec::train {

void load_quantized_dense(const std::vector<Parameter*>& parameters, const QuantizedModel& model) {
    for (Parameter* p : parameters) {
        const CheckpointTensor* saved = nullptr;
        for (const CheckpointTensor& t : model.dense)
            saved = t.name == p->name ? &t : saved;
        SR_CHECK(saved != nullptr, "quantized model {}: no dense parameter '{}'", model.dir,
                 p->name);
        SR_CHECK(saved->shape == p->value.shape() && saved->dtype == p->value.dtype(),
                 "quantized model {}: '{}' is {} {}, the model has {}", model.dir, saved->name,
                 dtype_name(saved->dtype), shape_str(saved->shape), p->value.str());
        p->value.copy_from(read_quantized_dense(model, *saved));
    }
}

void load_quantized_remap(ManagedCollisionTables& mc, const QuantizedModel& model) {
    for (const QuantizedRemapState& r : model.managed_collision) {
        SR_CHECK(mc.manages(r.table),
                 "quantized model {}: table '{}' has a managed-collision remap state, but the "
                 "config's table has no model.tables[].managed_collision (use the model's config)",
                 model.dir, r.table);
    }
    for (size_t i = 0; i < mc.size(); ++i) {
        int64_t listed = 0;
        for (const QuantizedRemapState& r : model.managed_collision)
            listed += r.table == mc.table_name(i) ? 1 : 0;
        SR_CHECK(listed == mc.num_buckets(i),
                 "quantized model {}: managed-collision table '{}' has the remap state of {} "
                 "bucket(s), the config's total_num_buckets is {} (use the model's config, or "
                 "quantize a checkpoint trained with model.tables[].managed_collision)",
                 model.dir, mc.table_name(i), listed, mc.num_buckets(i));
        for (const QuantizedRemapState& r : model.managed_collision) {
            if (r.table != mc.table_name(i))
                continue;
            SR_CHECK(r.bucket >= 0 && r.bucket < mc.num_buckets(i),
                     "quantized model {}: managed-collision table '{}' bucket {} is not one of "
                     "the config's {}",
                     model.dir, r.table, r.bucket, mc.num_buckets(i));
            if (!mc.owns(i, r.bucket))
                continue;  // another rank's (eval --model on several ranks)
            const fs::path file = fs::path(model.dir) / r.file;
            mc.load_state_tensor(i, r.bucket, read_tensor(file, {r.elements}, DType::kI64),
                                 file.string());
        }
    }
}

namespace {

// Columns [c0, c0 + cols) of n dequantized rows [n, D] into dst [n, cols] of `dtype`.
void narrow_rows(
    const float* rows, int64_t n, int64_t D, int64_t c0, int64_t cols, DType dtype, void* dst) {
    visit_float_dtype(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        for (int64_t r = 0; r < n; ++r) {
            for (int64_t c = 0; c < cols; ++c)
                static_cast<T*>(dst)[r * cols + c] = from_float<T>(rows[r * D + c0 + c]);
        }
    });
}

}  // namespace

void load_quantized_model(Trainer& trainer, const QuantizedModel& model) {
    load_quantized_dense(trainer.model().parameters(), model);
    load_quantized_remap(trainer.managed_collision(), model);
    const auto configs = embedding_bag_configs(trainer.config().model);
    for (EmbeddingShardState& s : trainer.model().sparse_arch().shard_states()) {
        const EmbeddingBagConfig& config = configs.at(static_cast<size_t>(s.table));
        const QuantizedTable* t = model.table(config.name);
        SR_CHECK(t != nullptr, "quantized model {}: no table '{}'", model.dir, config.name);
        SR_CHECK(
            t->num_embeddings == config.num_embeddings && t->embedding_dim == config.embedding_dim,
            "quantized model {}: table '{}' is [{}, {}], the config's [{}, {}]", model.dir, t->name,
            t->num_embeddings, t->embedding_dim, config.num_embeddings, config.embedding_dim);
        // The shard's rows as stored, mapped: read as they are dequantized, never whole in f32.
        const Tensor codes = read_quantized_rows(model, *t, s.row_offset, s.rows);
        const int64_t D = t->embedding_dim, row_bytes = kernels::quant_row_bytes(t->type, D);
        const kernels::QuantType type = t->type;
        const int64_t c0 = s.col_offset, cols = s.cols;
        if (s.cached != nullptr) {
            // A key_value (or HBM-cached) shard: emptied, each row dequantized when a lookup
            // first needs it, so a table larger than memory evaluates too.
            s.cached->reset();
            std::vector<float> row(static_cast<size_t>(D));
            s.cached->set_initial_rows(
                [codes, type, D, row_bytes, c0, cols, row](int64_t r, Tensor& weight) mutable {
                    kernels::cpu::dequantize_rows(codes.data<uint8_t>() + r * row_bytes, 1, D, type,
                                                  row.data());
                    narrow_rows(row.data(), 1, D, c0, cols, weight.dtype(), weight.data_ptr());
                });
            continue;
        }
        const int64_t per_block = std::max<int64_t>(1, (int64_t{64} << 20) / (4 * D));
        std::vector<float> rows(static_cast<size_t>(std::min(per_block, s.rows) * D));
        Tensor host = Tensor::empty({std::min(per_block, s.rows), cols}, s.weight.dtype());
        for (int64_t first = 0; first < s.rows; first += per_block) {
            const int64_t n = std::min(per_block, s.rows - first);
            kernels::cpu::dequantize_rows(codes.data<uint8_t>() + first * row_bytes, n, D, type,
                                          rows.data());
            Tensor part = host.slice(0, n);
            narrow_rows(rows.data(), n, D, c0, cols, part.dtype(), part.data_ptr());
            Tensor into = s.weight.slice(first, first + n);
            into.copy_from(part);
        }
    }
}

}  // namespace shardrec::train
