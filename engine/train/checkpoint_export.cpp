// ckpt info and export: the manifest summarised, the tables assembled from their saved shards,
// and the .npy and safetensors writers.
#include "engine/train/checkpoint_export.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "engine/core/durable_file.h"
#include "engine/core/log.h"
#include "engine/train/checkpoint.h"
#include "engine/train/managed_collision_tables.h"
#include "engine/train/torchrec_interop.h"

namespace shardrec::train {
namespace fs = std::filesystem;

namespace {

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

// A tensor of the export: its dtype and shape, and its bytes handed in order, piece by piece, to
// a sink (a table block by block from the checkpoint: an export of any size in bounded memory).
struct ExportTensor {
    std::string name;
    DType dtype;
    Shape shape;
    std::function<void(const std::function<void(const Tensor&)>&)> pieces;
};

ExportTensor in_memory(std::string name, Tensor t) {
    const DType dtype = t.dtype();
    const Shape shape = t.shape();
    return {std::move(name), dtype, shape,
            [t](const std::function<void(const Tensor&)>& sink) { sink(t); }};
}

std::string npy_header(DType dtype, const Shape& shape) {
    const char* descr = nullptr;
    switch (dtype) {
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
            SR_CHECK(false, "npy: dtype {} has no NumPy type here", dtype_name(dtype));
    }
    std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                     descr, shape_tuple(shape));
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
    return head + header;
}

// NAME.npy; bf16 as f32 (NumPy has no bfloat16).
void write_npy(const std::string& path, const ExportTensor& t) {
    const bool widen = t.dtype == DType::kBF16;
    DurableFileWriter file(path);
    const std::string head = npy_header(widen ? DType::kF32 : t.dtype, t.shape);
    file.write(head.data(), head.size());
    t.pieces([&](const Tensor& piece) {
        const Tensor out = widen ? rows_as_f32(piece) : piece;
        file.write(out.data_ptr(), out.nbytes());
    });
    file.commit();
}

// One safetensors file of the tensors, in the order given.
void write_safetensors(const std::string& path, const std::vector<ExportTensor>& tensors) {
    std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
    int64_t offset = 0;
    for (const ExportTensor& t : tensors) {
        const int64_t bytes = shape_numel(t.shape) * dtype_size(t.dtype);
        json += fmt::format(",\"{}\":{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[{},{}]}}",
                            t.name, safetensors_dtype(t.dtype), shape_json(t.shape), offset,
                            offset + bytes);
        offset += bytes;
    }
    json += "}";
    json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    std::string head(8, '\0');
    for (int i = 0; i < 8; ++i)
        head[static_cast<size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    DurableFileWriter file(path);
    file.write(head.data(), head.size());
    file.write(json.data(), json.size());
    for (const ExportTensor& t : tensors)
        t.pieces([&](const Tensor& piece) { file.write(piece.data_ptr(), piece.nbytes()); });
    SR_CHECK(file.bytes() == static_cast<int64_t>(head.size() + json.size()) + offset,
             "safetensors {}: wrote {} bytes of data, the header says {}", path,
             file.bytes() - static_cast<int64_t>(head.size() + json.size()), offset);
    file.commit();
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
    write_npy(path, in_memory("", t));
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
        int64_t buckets = 0;  // its rows are slots of a remap (managed_collision)
        while (std::any_of(m.files.begin(), m.files.end(), [&](const CheckpointFile& f) {
            return f.path == managed_collision_file(t.name, buckets);
        }))
            ++buckets;
        if (buckets > 0)
            out << fmt::format("; managed-collision remap in {} bucket(s)", buckets);
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
    std::error_code ec;
    SR_CHECK(
        !fs::exists(out_dir, ec) || (fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)),
        "ckpt export: --out '{}' {}; remove it or choose another --out", out_dir,
        fs::is_directory(out_dir, ec) ? "already holds files" : "is a file");
    fs::create_directories(out_dir);
    std::vector<ExportTensor> tensors;
    for (const CheckpointTable& t : m.tables) {
        tensors.push_back({table_export_name(t.name),
                           t.dtype,
                           {t.num_embeddings, t.embedding_dim},
                           [&dir, &m, &t](const std::function<void(const Tensor&)>& sink) {
                               for_each_table_block(
                                   dir, m, t, [&](int64_t, const Tensor& block) { sink(block); });
                           }});
    }
    NamedTensors dense;
    for (const auto& d : m.dense)
        dense.emplace_back(d.name, read_dense(dir, d));
    // TorchRec's names and the column order of its InteractionArch (torchrec_interop.h).
    SR_CHECK(!m.tables.empty(), "checkpoint {} has no tables", dir);
    for (auto& [name, t] : dense_to_torchrec(m.model_type, m.tables.front().embedding_dim, dense))
        tensors.push_back(in_memory(std::move(name), std::move(t)));
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
    for (const ExportTensor& t : tensors) {
        if (format == "npy") {
            write_npy((fs::path(out_dir) / (t.name + ".npy")).string(), t);
        }
        names.push_back(t.name);
    }
    return names;
}

}  // namespace shardrec::train
