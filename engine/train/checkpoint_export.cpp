// ckpt info and export: the manifest summarised, the tables assembled from their saved shards,
// and the .npy and safetensors writers.
#include "engine/train/checkpoint_export.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/log.h"
#include "engine/train/checkpoint.h"
#include "engine/train/managed_collision_tables.h"
#include "engine/train/torchrec_interop.h"

namespace shardrec::train {
namespace fs = std::filesystem;

namespace {

// Writes `bytes` to path through a temporary name, so no partial file is ever left under path.
void write_file_atomic(const fs::path& path, const std::string& head, const Tensor& body) {
    const fs::path tmp = path.string() + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    SR_CHECK(f != nullptr, "cannot create {}", tmp.string());
    bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
    if (body.defined())
        ok = ok && std::fwrite(body.data_ptr(), 1, body.nbytes(), f) == body.nbytes();
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed) {
        std::error_code ec;
        fs::remove(tmp, ec);
        SR_CHECK(false, "writing {} failed (disk full?)", path.string());
    }
    fs::rename(tmp, path);
}

std::string shape_tuple(const Shape& shape) {  // Python tuple syntax: (3,) and (3, 4)
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

std::string shape_json(const Shape& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

const char* safetensors_dtype(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return "F32";
        case DType::kF16:
            return "F16";
        case DType::kBF16:
            return "BF16";
        case DType::kI32:
            return "I32";
        case DType::kI64:
            return "I64";
        default:
            SR_CHECK(false, "safetensors: dtype {} is not exported", dtype_name(dtype));
    }
    return "";
}

Tensor to_f32(const Tensor& t) {
    Tensor out = Tensor::empty(t.shape(), DType::kF32);
    float* o = out.data<float>();
    const BFloat16* b = t.data<BFloat16>();
    for (int64_t i = 0; i < t.numel(); ++i)
        o[i] = bf16_to_float(b[i]);
    return out;
}

// The whole table [E, D] in its saved dtype, from its shards.
Tensor assemble_table(const std::string& dir,
                      const CheckpointManifest& m,
                      const CheckpointTable& table) {
    Tensor full = Tensor::empty({table.num_embeddings, table.embedding_dim}, table.dtype);
    read_table_region(dir, m, table, -1, 0, table.num_embeddings, 0, table.embedding_dim, full);
    return full;
}

Tensor read_dense(const std::string& dir, const CheckpointTensor& t) {
    Tensor out = Tensor::empty(t.shape, t.dtype);
    std::ifstream in(fs::path(dir) / t.file, std::ios::binary);
    in.read(static_cast<char*>(out.data_ptr()), static_cast<std::streamsize>(out.nbytes()));
    SR_CHECK(in.gcount() == static_cast<std::streamsize>(out.nbytes()),
             "checkpoint {}: {} is shorter than {}", dir, t.file, out.str());
    return out;
}

}  // namespace

std::string table_export_name(const std::string& table) {
    return "sparse_arch.embedding_bag_collection.embedding_bags." + table + ".weight";
}

void write_npy(const std::string& path, const Tensor& t) {
    const char* descr = nullptr;
    switch (t.dtype()) {
        case DType::kF32:
            descr = "<f4";
            break;
        case DType::kF16:
            descr = "<f2";
            break;
        case DType::kI32:
            descr = "<i4";
            break;
        case DType::kI64:
            descr = "<i8";
            break;
        default:
            SR_CHECK(false, "npy: dtype {} has no NumPy type here", dtype_name(t.dtype()));
    }
    std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                     descr, shape_tuple(t.shape()));
    // Magic (6) + version (2) + header length (2) + header, padded with spaces and ended by a
    // newline to a multiple of 64 bytes (what NumPy writes, so the data is aligned).
    const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
    header.append(total - 10 - header.size() - 1, ' ');
    header += '\n';
    std::string head = "\x93NUMPY";
    head += '\x01';
    head += '\x00';
    head += static_cast<char>(header.size() & 0xff);
    head += static_cast<char>((header.size() >> 8) & 0xff);
    write_file_atomic(path, head + header, t);
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors) {
    std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
    size_t offset = 0;
    for (const auto& [name, t] : tensors) {
        json += fmt::format(",\"{}\":{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[{},{}]}}",
                            name, safetensors_dtype(t.dtype()), shape_json(t.shape()), offset,
                            offset + t.nbytes());
        offset += t.nbytes();
    }
    json += "}";
    json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    std::string head(8, '\0');
    for (int i = 0; i < 8; ++i)
        head[static_cast<size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    Tensor data = Tensor::empty({static_cast<int64_t>(offset)}, DType::kU8);
    size_t at = 0;
    for (const auto& [name, t] : tensors) {
        std::memcpy(data.data<uint8_t>() + at, t.data_ptr(), t.nbytes());
        at += t.nbytes();
    }
    write_file_atomic(path, head + json, data);
}

std::string checkpoint_info(const std::string& dir_in) {
    const std::string dir = resolve_checkpoint(dir_in);
    const CheckpointManifest m = read_manifest(dir);
    const std::string problem = verify_checkpoint_files(dir, m);
    std::ostringstream out;
    out << fmt::format("checkpoint {}\n", dir);
    out << fmt::format("  step {} (training continues with step {}), seed {}\n", m.step, m.step + 1,
                       m.seed);
    out << fmt::format("  written by {} rank(s), global batch {}\n", m.world_size,
                       m.global_batch_size);
    out << fmt::format("  model {}; sparse optimizer {}; dense optimizer {}\n", m.model_type,
                       m.sparse_optimizer, m.dense_optimizer);
    out << "  tables:\n";
    // Columns as wide as their widest entry, so the rows line up whatever the shapes.
    size_t name_w = 0, shape_w = 0;
    const auto shape = [](const auto& t) {
        return fmt::format("[{}, {}]", t.num_embeddings, t.embedding_dim);
    };
    for (const auto& t : m.tables) {
        name_w = std::max(name_w, t.name.size());
        shape_w = std::max(shape_w, shape(t).size());
    }
    for (const auto& t : m.tables) {
        out << fmt::format("    {:<{}} {:<{}} {:<5} {:<15} {} shard(s):", t.name, name_w, shape(t),
                           shape_w, dtype_name(t.dtype), t.sharding_type, t.shards.size());
        for (const auto& s : t.shards) {
            out << fmt::format(" rank {} [{}:{}, {}:{}]", s.rank, s.row_offset,
                               s.row_offset + s.rows, s.col_offset, s.col_offset + s.cols);
        }
        out << "\n";
    }
    int64_t dense_values = 0;
    for (const auto& d : m.dense)
        dense_values += shape_numel(d.shape);
    out << fmt::format("  dense parameters: {} tensors, {} values\n", m.dense.size(), dense_values);
    out << fmt::format("  files: {}, {} bytes; checksums: {}\n", m.files.size(), m.total_bytes(),
                       problem.empty() ? "ok" : problem);
    return out.str();
}

std::vector<std::string> export_checkpoint(const std::string& dir_in,
                                           const std::string& format,
                                           const std::string& out_dir) {
    SR_CHECK(format == "npy" || format == "safetensors",
             "ckpt export: --format {}: npy or safetensors", format);
    const std::string dir = resolve_checkpoint(dir_in);
    const CheckpointManifest m = read_manifest(dir);
    const std::string problem = verify_checkpoint_files(dir, m);
    SR_CHECK(problem.empty(), "{}", problem);
    fs::create_directories(out_dir);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& t : m.tables)
        tensors.emplace_back(table_export_name(t.name), assemble_table(dir, m, t));
    NamedTensors dense;
    for (const auto& d : m.dense)
        dense.emplace_back(d.name, read_dense(dir, d));
    // TorchRec's names and the column order of its InteractionArch (torchrec_interop.h).
    SR_CHECK(!m.tables.empty(), "checkpoint {} has no tables", dir);
    for (auto& named : dense_to_torchrec(m.model_type, m.tables.front().embedding_dim, dense))
        tensors.push_back(std::move(named));
    const std::string shape_problem = torchrec_shape_problem(m.model_type, dense);
    if (shape_problem.empty()) {
        log::root().info("{}.load_state_dict(..., strict=True) takes this export",
                         torchrec_model_class(m.model_type));
    } else {
        log::root().warn("no {} has this model's shape ({}); the names follow TorchRec's modules",
                         torchrec_model_class(m.model_type), shape_problem);
    }
    std::vector<std::string> names;
    // Managed-collision tables: the raw id -> row map beside the tables, in its own .npy (the
    // model file stays exactly a TorchRec state_dict): every bucket's (id, row) pairs, rows
    // ascending (bucket b's rows start at b * num_embeddings / K).
    for (const CheckpointTable& t : m.tables) {
        std::vector<const CheckpointFile*> buckets;
        for (bool more = true; more;) {
            const std::string file =
                managed_collision_file(t.name, static_cast<int64_t>(buckets.size()));
            more = false;
            for (const CheckpointFile& f : m.files) {
                if (f.path == file) {
                    buckets.push_back(&f);
                    more = true;
                }
            }
        }
        if (buckets.empty())
            continue;
        const auto k = static_cast<int64_t>(buckets.size());
        std::vector<Tensor> maps;
        int64_t slots = 0;
        for (int64_t b = 0; b < k; ++b) {
            const CheckpointFile& f = *buckets[static_cast<size_t>(b)];
            const Tensor state = read_dense(dir, {t.name, DType::kI64, {f.bytes / 8}, f.path});
            maps.push_back(ManagedCollisionTables::id_to_row(state, b * (t.num_embeddings / k),
                                                             dir + "/" + f.path));
            slots += maps.back().shape()[0];
        }
        Tensor map = Tensor::empty({slots, 2}, DType::kI64);
        int64_t at = 0;
        for (const Tensor& part : maps) {
            std::memcpy(map.data<int64_t>() + 2 * at, part.data_ptr(), part.nbytes());
            at += part.shape()[0];
        }
        const std::string name = "managed_collision/" + t.name + ".id_to_row";
        fs::create_directories(fs::path(out_dir) / "managed_collision");
        write_npy((fs::path(out_dir) / (name + ".npy")).string(), map);
        names.push_back(name);
    }
    if (format == "safetensors") {
        write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors);
    }
    for (auto& [name, t] : tensors) {
        if (format == "npy") {
            write_npy((fs::path(out_dir) / (name + ".npy")).string(),
                      t.dtype() == DType::kBF16 ? to_f32(t) : t);
        }
        names.push_back(name);
    }
    return names;
}

}  // namespace shardrec::train
