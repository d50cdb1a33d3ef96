// Checkpoint save and load: files, the agreement of the ranks, and reading saved shards by region.
#include "engine/train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "engine/core/crc32.h"
#include "engine/core/durable_file.h"
#include "engine/core/log.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/train/checkpoint_collective.h"
#include "engine/train/trainer.h"

namespace shardrec::train {
namespace fs = std::filesystem;

namespace {

std::string step_name(int64_t step) {
    return fmt::format("step-{:08d}", step);
}

// ---- files ----

// A file written in pieces, synced before the manifest that lists it is written, so a published
// checkpoint never names contents that a crash could still lose.
class TensorFileWriter {
public:
    TensorFileWriter(const fs::path& dir, std::string rel)
        : rel_(std::move(rel)), path_(dir / rel_) {
        f_ = std::fopen(path_.c_str(), "wb");
        SR_CHECK(f_ != nullptr, "checkpoint: cannot create {}: {}", path_.string(),
                 std::strerror(errno));
    }

    ~TensorFileWriter() {
        if (f_ != nullptr)
            std::fclose(f_);
    }

    void append(const Tensor& device_t) {
        const Tensor t = device_t.device().is_cpu() ? device_t : device_t.to(Device::cpu());
        const size_t n = t.nbytes();
        SR_CHECK(std::fwrite(t.data_ptr(), 1, n, f_) == n, "checkpoint: writing {} failed: {}",
                 path_.string(), std::strerror(errno));
        crc_ = crc32(t.data_ptr(), n, crc_);
        bytes_ += static_cast<int64_t>(n);
    }

    CheckpointFile finish() {
        const bool ok = std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
        const int err = errno;
        const bool closed = std::fclose(f_) == 0;
        f_ = nullptr;
        SR_CHECK(ok && closed, "checkpoint: writing {} failed: {}", path_.string(),
                 std::strerror(err));
        return {rel_, bytes_, crc_};
    }

private:
    std::string rel_;
    fs::path path_;
    std::FILE* f_ = nullptr;
    uint32_t crc_ = 0;
    int64_t bytes_ = 0;
};

CheckpointFile write_tensor_file(const fs::path& dir, const std::string& rel, const Tensor& t) {
    TensorFileWriter w(dir, rel);
    w.append(t);
    return w.finish();
}

// A key_value shard: its rows not at their initial value, streamed in chunks so that a table
// bigger than memory saves within the cache's memory (rows are read from its store).
void write_stored_rows(const fs::path& dir,
                       const std::string& base,
                       const CheckpointManifest& m,
                       CachedEmbeddingShard& cached,
                       CheckpointShard& cs,
                       std::vector<CheckpointFile>& files) {
    constexpr int64_t kChunkRows = 1 << 16;
    cached.flush();
    cs.row_ids = base + "row_ids.bin";
    // In the store's order: its file is read front to back.
    std::vector<TensorFileWriter> writers;
    writers.reserve(2 + m.sparse_state.size());
    writers.emplace_back(dir, cs.row_ids);
    writers.emplace_back(dir, base + "weight.bin");
    for (const std::string& state : m.sparse_state)
        writers.emplace_back(dir, base + state + ".bin");
    int64_t saved = 0;
    cached.scan_stored(kChunkRows, [&](const std::vector<int64_t>& rows, const Tensor& weight,
                                       const std::vector<Tensor>& states) {
        SR_CHECK(states.size() == m.sparse_state.size(),
                 "checkpoint: table '{}' has {} optimizer states, {} expected for {}",
                 cached.layout().table, states.size(), m.sparse_state.size(), m.sparse_optimizer);
        writers[0].append(Tensor::from_vector(rows));
        writers[1].append(weight);
        for (size_t i = 0; i < states.size(); ++i)
            writers[i + 2].append(states[i]);
        saved += static_cast<int64_t>(rows.size());
    });
    cs.stored_rows = saved;
    files.push_back(writers[0].finish());
    for (size_t i = 1; i < writers.size(); ++i) {
        files.push_back(writers[i].finish());
        cs.files.push_back(files.back().path);
    }
}

// ---- what is saved ----

std::string sharding_type_of(EmbeddingBagCollectionInterface& sparse, const std::string& table) {
    auto* sharded = dynamic_cast<ShardedEmbeddingBagCollection*>(&sparse);
    return sharded == nullptr ? "unsharded"
                              : sharding_type_name(sharded->plan().at(table).sharding_type);
}

}  // namespace

CheckpointManifest describe_trainer(Trainer& trainer, int64_t step) {
    const Config& config = trainer.config();
    CheckpointManifest m;
    m.run_id = trainer.run_id();
    m.step = step;
    m.samples = trainer.samples_at(step);
    m.seed = config.train.seed;
    m.world_size = trainer.process_group() ? trainer.process_group()->size() : 1;
    m.global_batch_size = trainer.global_batch_size();
    m.model_type = config.model.type;
    m.sparse_optimizer = config.optimizer.sparse.type;
    m.sparse_state = sparse_state_names(m.sparse_optimizer);
    m.dense_optimizer = config.optimizer.dense.type;
    m.initial_accumulator_value = config.optimizer.sparse.initial_accumulator_value;
    for (const EmbeddingBagConfig& t : embedding_bag_configs(config.model)) {
        m.tables.push_back({t.name,
                            t.num_embeddings,
                            t.embedding_dim,
                            t.data_type,
                            sharding_type_of(trainer.model().sparse_arch(), t.name),
                            {}});
    }
    for (Parameter* p : trainer.model().parameters()) {
        m.dense.push_back(
            {p->name, p->value.dtype(), p->value.shape(), "dense/" + p->name + ".bin"});
    }
    for (const auto& [name, t] : trainer.dense_optimizer().state()) {
        m.dense_optimizer_state.push_back(
            {name, t->dtype(), t->shape(), "dense_optimizer/" + name + ".bin"});
    }
    return m;
}

namespace {

// This rank's files: its table shards (replicated ones on rank 0 only), and on rank 0 the dense
// parameters and dense optimizer state. Returns the shards' part of the manifest as YAML.
std::string write_rank_files(Trainer& trainer, const CheckpointManifest& m, const fs::path& dir) {
    const int rank = trainer.process_group() ? trainer.process_group()->rank() : 0;
    std::vector<std::pair<std::string, CheckpointShard>> shards;
    std::vector<CheckpointFile> files;
    for (const EmbeddingShardState& s : trainer.model().sparse_arch().shard_states()) {
        if (s.replicated && rank != 0)
            continue;
        const std::string& table = m.tables.at(static_cast<size_t>(s.table)).name;
        CheckpointShard cs;
        cs.rank = rank;
        cs.row_offset = s.row_offset;
        cs.rows = s.rows;
        cs.col_offset = s.col_offset;
        cs.cols = s.cols;
        cs.optimizer_step = s.optimizer_step ? *s.optimizer_step : 1;
        const std::string base = fmt::format("tables/{}.{}.{}.", table, s.row_offset, s.col_offset);
        if (s.cached != nullptr) {
            write_stored_rows(dir, base, m, *s.cached, cs, files);
            shards.emplace_back(table, std::move(cs));
            continue;
        }
        files.push_back(write_tensor_file(dir, base + "weight.bin", s.weight));
        cs.files.push_back(files.back().path);
        SR_CHECK(s.optimizer_state.size() == m.sparse_state.size(),
                 "checkpoint: table '{}' has {} optimizer states, {} expected for {}", table,
                 s.optimizer_state.size(), m.sparse_state.size(), m.sparse_optimizer);
        for (size_t i = 0; i < s.optimizer_state.size(); ++i) {
            files.push_back(
                write_tensor_file(dir, base + m.sparse_state[i] + ".bin", s.optimizer_state[i]));
            cs.files.push_back(files.back().path);
        }
        shards.emplace_back(table, std::move(cs));
    }
    if (rank == 0) {
        const auto params = trainer.model().parameters();
        for (size_t i = 0; i < params.size(); ++i)
            files.push_back(write_tensor_file(dir, m.dense[i].file, params[i]->value));
        const auto state = trainer.dense_optimizer().state();
        for (size_t i = 0; i < state.size(); ++i)
            files.push_back(
                write_tensor_file(dir, m.dense_optimizer_state[i].file, *state[i].second));
    }
    // The remap state of the managed-collision buckets this rank keeps.
    const ManagedCollisionTables& mc = trainer.managed_collision();
    for (size_t i = 0; i < mc.size(); ++i) {
        for (int64_t b = 0; b < mc.num_buckets(i); ++b) {
            if (mc.owns(i, b))
                files.push_back(write_tensor_file(dir, managed_collision_file(mc.table_name(i), b),
                                                  mc.state_tensor(i, b)));
        }
    }
    return shards_to_yaml(shards, files);
}

// Complete checkpoints (step-<N> with a manifest) in `parent`, oldest first.
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const fs::path& parent) {
    std::vector<std::pair<int64_t, fs::path>> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("step-", 0) != 0 || !fs::exists(entry.path() / kManifestName))
            continue;
        try {
            out.emplace_back(std::stoll(name.substr(5)), entry.path());
        } catch (const std::exception&) {  // not one of ours
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

// The run id in a checkpoint's manifest; nullopt when the manifest cannot be read.
std::optional<std::string> run_id_of(const fs::path& checkpoint) {
    try {
        return read_manifest(checkpoint.string()).run_id;
    } catch (const Error&) {
        return std::nullopt;
    }
}

// Rank 0, after every rank wrote: the manifest, the rename, the pruning. Everything is synced
// before the rename that publishes it, and the rename before anything older is removed.
void publish(const CheckpointManifest& m,
             const fs::path& tmp,
             const fs::path& final_dir,
             int64_t keep) {
    const fs::path parent = final_dir.parent_path();
    write_file_atomically((tmp / kManifestName).string(), manifest_to_yaml(m));
    for (const char* sub : {"tables", "dense", "dense_optimizer"})
        sync_directory((tmp / sub).string());
    sync_directory(tmp.string());
    // An older save of the same step (of this run) is replaced only once this one is complete.
    const fs::path old = parent / (".old-" + final_dir.filename().string());
    fs::remove_all(old);
    if (fs::exists(final_dir)) {
        const std::optional<std::string> id = run_id_of(final_dir);
        SR_CHECK(!id || *id == m.run_id,
                 "checkpoint: {} is a checkpoint of another run ({}), which this run ({}) does not "
                 "replace: use another checkpoint directory",
                 final_dir.string(), *id, m.run_id);
        fs::rename(final_dir, old);
    }
    fs::rename(tmp, final_dir);
    sync_directory(parent.string());
    fs::remove_all(old);
    // Leftovers of failed saves (never complete, never resumed from) go too.
    for (const auto& entry : fs::directory_iterator(parent)) {
        if (entry.path().filename().string().rfind(".tmp-step-", 0) == 0)
            fs::remove_all(entry.path());
    }
    // Only this run's checkpoints count and go: another run's in the same directory, or one
    // whose manifest cannot be read, is never removed. keep 0 keeps all: no manifest to read.
    if (keep <= 0)
        return;
    std::vector<fs::path> mine;
    for (const auto& [step, path] : complete_checkpoints(parent)) {
        if (run_id_of(path) == m.run_id)
            mine.push_back(path);
    }
    for (size_t i = 0; i + static_cast<size_t>(keep) < mine.size(); ++i)
        fs::remove_all(mine[i]);
}

}  // namespace

// ---- save ----

std::string save_checkpoint(Trainer& trainer,
                            const std::string& parent,
                            int64_t step,
                            int64_t keep) {
    SR_CHECK(!trainer.ahead_of_model(),
             "checkpoint of step {}: the pipeline holds {} batch(es) whose managed-collision remap "
             "ran already: train them first",
             step, trainer.num_queued());
    trainer.synchronize();
    comm::ProcessGroup* pg = trainer.process_group().get();
    const int rank = pg ? pg->rank() : 0;
    const fs::path final_dir = fs::path(parent) / step_name(step);
    const fs::path tmp = fs::path(parent) / (".tmp-" + step_name(step));
    auto cleanup = [&] {
        std::error_code ec;
        if (rank == 0)
            fs::remove_all(tmp, ec);
    };
    together(pg, [&] {
        if (rank == 0) {
            fs::remove_all(tmp);
            fs::create_directories(tmp / "tables");
            fs::create_directories(tmp / "dense");
            fs::create_directories(tmp / "dense_optimizer");
            fs::create_directories(tmp / "managed_collision");
        }
    });
    CheckpointManifest m = describe_trainer(trainer, step);
    std::string mine;
    together(
        pg, [&] { mine = write_rank_files(trainer, m, tmp); }, cleanup);
    const std::vector<std::string> parts = gather_strings(pg, mine);
    together(
        pg,
        [&] {
            if (rank != 0)
                return;
            for (const std::string& part : parts)
                append_shards_from_yaml(part, m);
            publish(m, tmp, final_dir, keep);
        },
        cleanup);
    log::root().info("checkpoint step {}: {} ({} files, {:.1f} MiB)", step, final_dir.string(),
                     m.files.size(), static_cast<double>(m.total_bytes()) / (1 << 20));
    return final_dir.string();
}

// ---- load ----

std::vector<std::string> checkpoint_candidates(const std::string& dir) {
    if (fs::exists(fs::path(dir) / kManifestName))
        return {dir};
    SR_CHECK(fs::exists(dir), "checkpoint {}: no such directory", dir);
    SR_CHECK(fs::is_directory(dir), "checkpoint {}: a file, not a checkpoint directory", dir);
    const auto all = complete_checkpoints(dir);
    SR_CHECK(!all.empty(),
             "checkpoint {}: no {} and no step-<N> directory holding one (a .tmp- directory is "
             "an incomplete save)",
             dir, kManifestName);
    std::vector<std::string> out;
    for (auto it = all.rbegin(); it != all.rend(); ++it)
        out.push_back(it->second.string());
    return out;
}

bool has_checkpoint(const std::string& dir) {
    return fs::exists(fs::path(dir) / kManifestName) ||
           (fs::is_directory(dir) && !complete_checkpoints(dir).empty());
}

std::string resolve_checkpoint(const std::string& dir) {
    return checkpoint_candidates(dir).front();
}

std::string checkpoint_run_id(const std::string& dir) {
    try {
        for (const std::string& c : checkpoint_candidates(dir)) {
            if (const std::optional<std::string> id = run_id_of(c))
                return *id;
        }
    } catch (const Error&) {  // the load that follows names the problem
    }
    return "";
}

std::string verify_checkpoint_files(const std::string& dir,
                                    const CheckpointManifest& m,
                                    int rank,
                                    int world_size) {
    std::vector<char> buffer(1 << 20);
    for (size_t i = 0; i < m.files.size(); ++i) {
        if (static_cast<int>(i % static_cast<size_t>(world_size)) != rank)
            continue;
        const CheckpointFile& f = m.files[i];
        const fs::path path = fs::path(dir) / f.path;
        std::ifstream in(path, std::ios::binary);
        if (!in.good())
            return fmt::format("checkpoint {}: missing file {}", dir, f.path);
        uint32_t crc = 0;
        int64_t bytes = 0;
        while (in) {
            in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
            crc = crc32(buffer.data(), static_cast<size_t>(in.gcount()), crc);
            bytes += in.gcount();
        }
        if (bytes != f.bytes) {
            return fmt::format("checkpoint {}: file {} has {} bytes, the manifest says {}", dir,
                               f.path, bytes, f.bytes);
        }
        if (crc != f.crc32) {
            return fmt::format(
                "checkpoint {}: file {} is corrupt: CRC-32 0x{:08x} expected (manifest), 0x{:08x} "
                "found",
                dir, f.path, f.crc32, crc);
        }
    }
    return "";
}

}  // namespace shardrec::train
