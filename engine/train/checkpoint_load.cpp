// Checkpoint load: the model signature check, and every local shard filled from the overlapping
// regions of the saved shards (any world size and plan).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/core/log.h"
#include "engine/modules/embedding_config.h"
#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_collective.h"
#include "engine/train/trainer.h"

namespace shardrec::train {
namespace fs = std::filesystem;

namespace {

std::string names_of(const std::vector<CheckpointTable>& tables) {
    std::string out;
    for (const auto& t : tables)
        out += (out.empty() ? "" : ", ") + t.name;
    return out;
}

// The model `trainer` is against the checkpoint's: every difference is named.
void check_signature(const CheckpointManifest& saved,
                     const CheckpointManifest& model,
                     const std::string& dir) {
    const std::string where = "checkpoint " + dir + " is from another model";
    SR_CHECK(saved.model_type == model.model_type, "{}: model.type {} in the checkpoint, {} here",
             where, saved.model_type, model.model_type);
    for (const CheckpointTable& t : model.tables) {
        const CheckpointTable* s = saved.table(t.name);
        SR_CHECK(s != nullptr, "{}: table '{}' is not in it (it has {})", where, t.name,
                 names_of(saved.tables));
        SR_CHECK(s->num_embeddings == t.num_embeddings && s->embedding_dim == t.embedding_dim &&
                     s->dtype == t.dtype,
                 "{}: table '{}' is [{}, {}] {} in the checkpoint, [{}, {}] {} here", where, t.name,
                 s->num_embeddings, s->embedding_dim, dtype_name(s->dtype), t.num_embeddings,
                 t.embedding_dim, dtype_name(t.dtype));
    }
    for (const CheckpointTable& s : saved.tables) {
        SR_CHECK(model.table(s.name) != nullptr, "{}: its table '{}' is not in this model ({})",
                 where, s.name, names_of(model.tables));
    }
    SR_CHECK(saved.dense.size() == model.dense.size(),
             "{}: {} dense parameters in the checkpoint, {} here", where, saved.dense.size(),
             model.dense.size());
    for (size_t i = 0; i < model.dense.size(); ++i) {
        const CheckpointTensor &s = saved.dense[i], &t = model.dense[i];
        SR_CHECK(s.name == t.name && s.shape == t.shape && s.dtype == t.dtype,
                 "{}: dense parameter {} is {} {} in the checkpoint, {} {} here", where, i, s.name,
                 shape_str(s.shape), t.name, shape_str(t.shape));
    }
    SR_CHECK(saved.sparse_optimizer == model.sparse_optimizer &&
                 saved.sparse_state == model.sparse_state,
             "{}: optimizer.sparse.type {} in the checkpoint, {} here", where,
             saved.sparse_optimizer, model.sparse_optimizer);
    SR_CHECK(saved.dense_optimizer == model.dense_optimizer,
             "{}: optimizer.dense.type {} in the checkpoint, {} here", where, saved.dense_optimizer,
             model.dense_optimizer);
}

const CheckpointTensor& find_tensor(const std::vector<CheckpointTensor>& list,
                                    const std::string& name,
                                    const std::string& dir) {
    for (const auto& t : list) {
        if (t.name == name)
            return t;
    }
    SR_CHECK(false, "checkpoint {}: no saved tensor '{}'", dir, name);
    return list.front();
}

void read_whole(const std::string& dir, const CheckpointTensor& saved, Tensor& out) {
    SR_CHECK(saved.shape == out.shape() && saved.dtype == out.dtype(),
             "checkpoint {}: '{}' is {} {}, the model has {}", dir, saved.name,
             dtype_name(saved.dtype), shape_str(saved.shape), out.str());
    if (!out.device().is_cpu()) {  // through a host copy
        Tensor host = Tensor::empty(out.shape(), out.dtype());
        read_whole(dir, saved, host);
        out.copy_from(host);
        return;
    }
    std::ifstream in(fs::path(dir) / saved.file, std::ios::binary);
    in.read(static_cast<char*>(out.data_ptr()), static_cast<std::streamsize>(out.nbytes()));
    SR_CHECK(in.gcount() == static_cast<std::streamsize>(out.nbytes()),
             "checkpoint {}: {} is shorter than {}", dir, saved.file, out.str());
}

void load_dense(Trainer& trainer, const CheckpointManifest& m, const std::string& dir) {
    const auto params = trainer.model().parameters();
    for (Parameter* p : params)
        read_whole(dir, find_tensor(m.dense, p->name, dir), p->value);
    if (m.dense_optimizer_state.empty())
        return;  // saved before the first step: the state is made by the first step
    trainer.dense_optimizer().init_state(params);
    for (const auto& [name, t] : trainer.dense_optimizer().state())
        read_whole(dir, find_tensor(m.dense_optimizer_state, name, dir), *t);
}

// Each managed-collision bucket's remap, exactly as saved (an exact resume needs it), read by the
// rank that keeps the bucket now. Every rank checks that the saved buckets are the config's.
void load_managed_collision(Trainer& trainer, const CheckpointManifest& m, const std::string& dir) {
    ManagedCollisionTables& mc = trainer.managed_collision();
    const auto listed = [&](const std::string& file) {
        return std::find_if(m.files.begin(), m.files.end(),
                            [&](const CheckpointFile& f) { return f.path == file; });
    };
    // A table trained with a remap has rows of slots, not of ids: read without it, its lookups
    // would take the wrong rows and its next checkpoint would lose the remap.
    for (const CheckpointTable& t : m.tables) {
        SR_CHECK(mc.manages(t.name) || listed(managed_collision_file(t.name, 0)) == m.files.end(),
                 "checkpoint {}: table '{}' has a managed-collision remap state ({}), but the "
                 "config's table has no model.tables[].managed_collision (use the run's config)",
                 dir, t.name, managed_collision_file(t.name, 0));
    }
    for (size_t i = 0; i < mc.size(); ++i) {
        const int64_t k = mc.num_buckets(i);
        SR_CHECK(listed(managed_collision_file(mc.table_name(i), k)) == m.files.end(),
                 "checkpoint {}: table '{}' was saved with more than the config's "
                 "managed_collision.total_num_buckets {} ({} is there)",
                 dir, mc.table_name(i), k, managed_collision_file(mc.table_name(i), k));
        for (int64_t b = 0; b < k; ++b) {  // every bucket there before any is read
            const std::string file = managed_collision_file(mc.table_name(i), b);
            SR_CHECK(listed(file) != m.files.end(),
                     "checkpoint {}: no managed-collision state of table '{}' bucket {} ({}): "
                     "it was saved without model.tables[].managed_collision or with another "
                     "total_num_buckets",
                     dir, mc.table_name(i), b, file);
        }
        for (int64_t b = 0; b < k; ++b) {
            if (!mc.owns(i, b))
                continue;
            const std::string file = managed_collision_file(mc.table_name(i), b);
            const auto found = listed(file);
            SR_CHECK(found->bytes % 8 == 0, "checkpoint {}: {} has {} bytes, not a multiple of 8",
                     dir, file, found->bytes);
            Tensor state = Tensor::empty({found->bytes / 8}, DType::kI64);
            read_whole(dir, CheckpointTensor{mc.table_name(i), DType::kI64, state.shape(), file},
                       state);
            mc.load_state_tensor(i, b, state, "checkpoint " + dir);
        }
    }
}

// A key_value shard: the rows any saved shard holds (all of a dense one's, the saved ones of a
// sparse one) written into its store in chunks, so a table bigger than memory loads within the
// cache's memory. Rows no saved shard holds stay at their initial value.
void load_cached_shard(const std::string& dir,
                       const CheckpointManifest& m,
                       const CheckpointTable& table,
                       EmbeddingShardState& s) {
    constexpr size_t kChunkRows = 1 << 16;
    CachedEmbeddingShard& cached = *s.cached;
    cached.reset();
    std::vector<int64_t> rows;  // table rows
    for (const CheckpointShard& sh : table.shards) {
        const int64_t r0 = std::max(s.row_offset, sh.row_offset);
        const int64_t r1 = std::min(s.row_offset + s.rows, sh.row_offset + sh.rows);
        if (r0 >= r1 || std::max(s.col_offset, sh.col_offset) >=
                            std::min(s.col_offset + s.cols, sh.col_offset + sh.cols))
            continue;
        if (sh.stored_rows < 0) {
            for (int64_t r = r0; r < r1; ++r)
                rows.push_back(r);
            continue;
        }
        for (const int64_t local : saved_row_ids(dir, sh)) {
            if (sh.row_offset + local >= r0 && sh.row_offset + local < r1)
                rows.push_back(sh.row_offset + local);
        }
    }
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    int64_t step = 1;
    for (size_t begin = 0; begin < rows.size(); begin += kChunkRows) {
        const std::vector<int64_t> chunk(
            rows.begin() + static_cast<std::ptrdiff_t>(begin),
            rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), begin + kChunkRows)));
        const auto n = static_cast<int64_t>(chunk.size());
        Tensor weight = Tensor::empty({n, s.cols}, table.dtype);
        read_table_rows(dir, m, table, -1, chunk, s.col_offset, s.cols, weight, &step);
        std::vector<Tensor> states;
        for (size_t i = 0; i < m.sparse_state.size(); ++i) {
            const bool per_row = m.sparse_optimizer == "rowwise_adagrad";
            states.push_back(Tensor::empty(per_row ? Shape{n} : Shape{n, s.cols}, DType::kF32));
            read_table_rows(dir, m, table, static_cast<int>(i), chunk, s.col_offset, s.cols,
                            states.back());
        }
        std::vector<int64_t> local(chunk.size());
        for (size_t i = 0; i < chunk.size(); ++i)
            local[i] = chunk[i] - s.row_offset;
        cached.write_rows(local, weight, states);
    }
    if (rows.empty() && !table.shards.empty())  // the step of the saved shards all the same
        step = table.shards.front().optimizer_step;
    if (s.optimizer_step != nullptr)
        *s.optimizer_step = step;
}

void load_shards(Trainer& trainer, const CheckpointManifest& m, const std::string& dir) {
    const auto configs = embedding_bag_configs(trainer.config().model);
    for (EmbeddingShardState& s : trainer.model().sparse_arch().shard_states()) {
        const std::string& name = configs.at(static_cast<size_t>(s.table)).name;
        const CheckpointTable* table = m.table(name);
        SR_CHECK(table != nullptr, "checkpoint {}: no table '{}'", dir, name);
        if (s.cached != nullptr) {
            load_cached_shard(dir, m, *table, s);
            continue;
        }
        int64_t step = 1;
        read_table_region(dir, m, *table, -1, s.row_offset, s.rows, s.col_offset, s.cols, s.weight,
                          &step);
        for (size_t i = 0; i < s.optimizer_state.size(); ++i) {
            read_table_region(dir, m, *table, static_cast<int>(i), s.row_offset, s.rows,
                              s.col_offset, s.cols, s.optimizer_state[i]);
        }
        if (s.optimizer_step != nullptr)
            *s.optimizer_step = step;
    }
}

// Bytes [offset, +bytes) of a file into out.
void read_at(std::ifstream& in, const fs::path& path, int64_t offset, int64_t bytes, void* out) {
    in.seekg(offset);
    in.read(static_cast<char*>(out), bytes);
    SR_CHECK(in.gcount() == bytes, "checkpoint: {} ends before byte {}", path.string(),
             offset + bytes);
}

// Rows of a region: `count` consecutive table rows from `first`, or the listed ones (ascending).
// Rows not saved are initialised this many at most in one call (bounded scratch).
constexpr int64_t kInitRun = 4096;

struct RegionRows {
    int64_t first = 0, count = 0;
    const std::vector<int64_t>* list = nullptr;

    int64_t at(int64_t i) const { return list ? (*list)[static_cast<size_t>(i)] : first + i; }

    // The position of table row `row` in the region, -1 when it is not in it.
    int64_t index_of(int64_t row) const {
        if (list == nullptr)
            return row >= first && row < first + count ? row - first : -1;
        const auto it = std::lower_bound(list->begin(), list->end(), row);
        return it != list->end() && *it == row ? it - list->begin() : -1;
    }

    // The region's rows [i0, i1) that fall in table rows [r0, r1).
    std::pair<int64_t, int64_t> within(int64_t r0, int64_t r1) const {
        if (list == nullptr) {
            const int64_t a = std::max(r0, first), b = std::min(r1, first + count);
            return a < b ? std::pair{a - first, b - first} : std::pair{int64_t{0}, int64_t{0}};
        }
        const auto a = std::lower_bound(list->begin(), list->end(), r0);
        const auto b = std::lower_bound(a, list->end(), r1);
        return {a - list->begin(), b - list->begin()};
    }
};

// The table index of `table` in the manifest (the init of rows a sparse shard did not save).
int64_t table_index(const CheckpointManifest& m, const CheckpointTable& table) {
    for (size_t i = 0; i < m.tables.size(); ++i) {
        if (m.tables[i].name == table.name)
            return static_cast<int64_t>(i);
    }
    return 0;
}

void read_rows_into(const std::string& dir,
                    const CheckpointManifest& m,
                    const CheckpointTable& table,
                    int state,
                    const RegionRows& region,
                    int64_t col_offset,
                    int64_t cols,
                    Tensor& out,
                    int64_t* optimizer_step) {
    const int64_t rows = region.count;
    const bool rowwise = state >= 0 && out.dim() == 1;
    const DType dtype = state >= 0 ? DType::kF32 : table.dtype;
    const auto elem = static_cast<int64_t>(dtype_size(dtype));
    SR_CHECK(out.dtype() == dtype && out.shape() == (rowwise ? Shape{rows} : Shape{rows, cols}),
             "checkpoint: table '{}' region [{}, {}] read into {}", table.name, rows, cols,
             out.str());
    if (!out.device().is_cpu()) {  // through a host copy
        Tensor host = Tensor::empty(out.shape(), out.dtype());
        read_rows_into(dir, m, table, state, region, col_offset, cols, host, optimizer_step);
        out.copy_from(host);
        return;
    }
    std::vector<double> acc(rowwise ? static_cast<size_t>(rows) : 0, 0.0);
    std::vector<float> saved_state;
    char* dst = static_cast<char*>(out.data_ptr());
    const float state_start =
        state == 0 && (m.sparse_optimizer == "adagrad" || m.sparse_optimizer == "rowwise_adagrad")
            ? static_cast<float>(m.initial_accumulator_value)
            : 0.f;
    int64_t covered = 0;
    bool have_step = false;
    for (const CheckpointShard& sh : table.shards) {
        const auto [i0, i1] = region.within(sh.row_offset, sh.row_offset + sh.rows);
        const int64_t c0 = std::max(col_offset, sh.col_offset);
        const int64_t c1 = std::min(col_offset + cols, sh.col_offset + sh.cols);
        if (i0 >= i1 || c0 >= c1)
            continue;
        const size_t index = static_cast<size_t>(state + 1);
        SR_CHECK(index < sh.files.size(), "checkpoint {}: a shard of table '{}' lists {} files",
                 dir, table.name, sh.files.size());
        const fs::path path = fs::path(dir) / sh.files[index];
        const int64_t saved_cols = rowwise ? 1 : sh.cols;
        const int64_t saved_rows = sh.stored_rows < 0 ? sh.rows : sh.stored_rows;
        const int64_t want = saved_rows * saved_cols * elem;
        SR_CHECK(m.file(sh.files[index]).bytes == want,
                 "checkpoint {}: {} holds {} bytes, its shard [{}, {}] needs {}", dir,
                 sh.files[index], m.file(sh.files[index]).bytes, saved_rows, saved_cols, want);
        std::ifstream in(path, std::ios::binary);
        SR_CHECK(in.good(), "checkpoint {}: missing file {}", dir, sh.files[index]);
        // Output row i of the region, its position k in the saved file: every row of a dense
        // shard; a sparse shard's saved rows, the others at their initial value first.
        std::vector<std::pair<int64_t, int64_t>> saved;  // (i, k)
        if (sh.stored_rows < 0) {
            for (int64_t i = i0; i < i1; ++i)
                saved.emplace_back(i, region.at(i) - sh.row_offset);
        } else {
            // In the saved files' order, so that they are read front to back.
            const std::vector<int64_t> ids = saved_row_ids(dir, sh);
            for (size_t k = 0; k < ids.size(); ++k) {
                const int64_t i = region.index_of(sh.row_offset + ids[k]);
                if (i >= i0 && i < i1)
                    saved.emplace_back(i, static_cast<int64_t>(k));
            }
            std::vector<char> is_saved(static_cast<size_t>(i1 - i0), 0);
            for (const auto& ik : saved)
                is_saved[static_cast<size_t>(ik.first - i0)] = 1;
            Tensor piece;  // initial values of a run of consecutive rows not saved
            for (int64_t i = i0; i < i1; ++i) {  // the rows not saved: their initial value
                if (is_saved[static_cast<size_t>(i - i0)])
                    continue;
                if (state < 0) {
                    // One call for the run of rows not saved from i on that are consecutive in
                    // the table too (a key_value shard's untouched rows are most of it).
                    int64_t end = i + 1;
                    while (end < i1 && end - i < kInitRun &&
                           !is_saved[static_cast<size_t>(end - i0)] &&
                           region.at(end) == region.at(end - 1) + 1)
                        ++end;
                    if (!piece.defined())
                        piece = Tensor::empty({kInitRun, c1 - c0}, dtype);
                    Tensor run = piece.slice(0, end - i);
                    init_embedding_rows(run, static_cast<uint64_t>(m.seed), table_index(m, table),
                                        region.at(i), c0, table.num_embeddings);
                    const int64_t row_bytes = (c1 - c0) * elem;
                    for (int64_t k = i; k < end; ++k)
                        std::memcpy(
                            dst + (k * cols + (c0 - col_offset)) * elem,
                            static_cast<const char*>(piece.data_ptr()) + (k - i) * row_bytes,
                            static_cast<size_t>(row_bytes));
                    i = end - 1;
                } else if (rowwise) {
                    acc[static_cast<size_t>(i)] += static_cast<double>(c1 - c0) * state_start;
                } else {
                    std::fill_n(reinterpret_cast<float*>(dst) + i * cols + (c0 - col_offset),
                                c1 - c0, state_start);
                }
            }
        }
        if (rowwise) {
            float v = 0;
            for (const auto& [i, k] : saved) {
                read_at(in, path, k * 4, 4, &v);
                acc[static_cast<size_t>(i)] += static_cast<double>(c1 - c0) * v;
            }
        } else if (region.list == nullptr && sh.stored_rows < 0 && c0 == col_offset &&
                   c1 - c0 == cols && c0 == sh.col_offset && c1 - c0 == sh.cols) {
            // whole rows on both sides: one read
            read_at(in, path, saved.front().second * cols * elem,
                    static_cast<int64_t>(saved.size()) * cols * elem,
                    dst + saved.front().first * cols * elem);
        } else {
            for (const auto& [i, k] : saved) {
                read_at(in, path, (k * sh.cols + (c0 - sh.col_offset)) * elem, (c1 - c0) * elem,
                        dst + (i * cols + (c0 - col_offset)) * elem);
            }
        }
        covered += (i1 - i0) * (c1 - c0);
        if (optimizer_step != nullptr) {
            SR_CHECK(!have_step || *optimizer_step == sh.optimizer_step,
                     "checkpoint {}: the shards of table '{}' are at optimizer steps {} and {}",
                     dir, table.name, *optimizer_step, sh.optimizer_step);
            *optimizer_step = sh.optimizer_step;
            have_step = true;
        }
    }
    SR_CHECK(covered == rows * cols,
             "checkpoint {}: the saved shards of table '{}' cover {} of the {} elements of {} "
             "rows from row {}, columns [{}, {})",
             dir, table.name, covered, rows * cols, rows, region.at(0), col_offset,
             col_offset + cols);
    if (rowwise) {
        float* o = out.data<float>();
        for (int64_t r = 0; r < rows; ++r)
            o[r] = static_cast<float>(acc[static_cast<size_t>(r)] / static_cast<double>(cols));
    }
}

}  // namespace

std::vector<int64_t> saved_row_ids(const std::string& dir, const CheckpointShard& shard) {
    std::vector<int64_t> ids(static_cast<size_t>(std::max<int64_t>(shard.stored_rows, 0)));
    const fs::path path = fs::path(dir) / shard.row_ids;
    std::ifstream in(path, std::ios::binary);
    SR_CHECK(in.good(), "checkpoint {}: missing file {}", dir, shard.row_ids);
    read_at(in, path, 0, static_cast<int64_t>(ids.size() * 8), ids.data());
    std::vector<bool> seen(static_cast<size_t>(shard.rows), false);
    for (size_t k = 0; k < ids.size(); ++k) {
        SR_CHECK(ids[k] >= 0 && ids[k] < shard.rows && !seen[static_cast<size_t>(ids[k])],
                 "checkpoint {}: {} lists row {} at position {}: ids must be distinct, in [0, {})",
                 dir, shard.row_ids, ids[k], k, shard.rows);
        seen[static_cast<size_t>(ids[k])] = true;
    }
    return ids;
}

void read_table_region(const std::string& dir,
                       const CheckpointManifest& m,
                       const CheckpointTable& table,
                       int state,
                       int64_t row_offset,
                       int64_t rows,
                       int64_t col_offset,
                       int64_t cols,
                       Tensor& out,
                       int64_t* optimizer_step) {
    read_rows_into(dir, m, table, state, RegionRows{row_offset, rows, nullptr}, col_offset, cols,
                   out, optimizer_step);
}

void read_table_rows(const std::string& dir,
                     const CheckpointManifest& m,
                     const CheckpointTable& table,
                     int state,
                     const std::vector<int64_t>& rows,
                     int64_t col_offset,
                     int64_t cols,
                     Tensor& out,
                     int64_t* optimizer_step) {
    read_rows_into(dir, m, table, state, RegionRows{0, static_cast<int64_t>(rows.size()), &rows},
                   col_offset, cols, out, optimizer_step);
}

void for_each_table_block(const std::string& dir,
                          const CheckpointManifest& m,
                          const CheckpointTable& table,
                          const std::function<void(int64_t, const Tensor&)>& fn,
                          int64_t block_bytes) {
    const int64_t D = table.embedding_dim, E = table.num_embeddings;
    const int64_t per_block =
        std::max<int64_t>(1, block_bytes / std::max<int64_t>(1, D * dtype_size(table.dtype)));
    Tensor block;
    for (int64_t first = 0; first < E; first += per_block) {
        const int64_t n = std::min(per_block, E - first);
        if (!block.defined() || block.shape()[0] != n)
            block = Tensor::empty({n, D}, table.dtype);
        read_table_region(dir, m, table, -1, first, n, 0, D, block);
        fn(first, block);
    }
}

Tensor rows_as_f32(const Tensor& rows) {
    if (rows.dtype() == DType::kF32)
        return rows;
    Tensor out = Tensor::empty(rows.shape(), DType::kF32);
    visit_float_dtype(rows.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* in = rows.data<T>();
        float* o = out.data<float>();
        for (int64_t i = 0; i < rows.numel(); ++i)
            o[i] = to_float(in[i]);
    });
    return out;
}

int64_t load_checkpoint(Trainer& trainer, const std::string& dir_in, const LoadOptions& options) {
    comm::ProcessGroup* pg = trainer.process_group().get();
    const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
    std::vector<std::string> candidates;
    together(pg, [&] { candidates = checkpoint_candidates(dir_in); });
    // The newest intact checkpoint: a damaged manifest or file moves on to the next older one
    // (only when dir_in is a directory of checkpoints); another model or seed is an error.
    std::string dir;
    CheckpointManifest m;
    for (size_t i = 0; i < candidates.size(); ++i) {
        const bool last = i + 1 == candidates.size();
        try {
            together(pg, [&] { m = read_manifest(candidates[i]); });
            together(pg, [&] {
                const std::string problem = verify_checkpoint_files(candidates[i], m, rank, world);
                SR_CHECK(problem.empty(), "{}", problem);
            });
        } catch (const Error& e) {
            if (last)
                throw;
            log::root().warn("skipping checkpoint {}: {}; trying the one before it", candidates[i],
                             e.what());
            continue;
        }
        dir = candidates[i];
        break;
    }
    together(pg, [&] {
        check_signature(m, describe_trainer(trainer, m.step), dir);
        SR_CHECK(!options.resume || m.seed == trainer.config().train.seed,
                 "checkpoint {} was written with train.seed {}, this run has {}: resuming would "
                 "read other data",
                 dir, m.seed, trainer.config().train.seed);
    });
    together(pg, [&] {
        load_dense(trainer, m, dir);
        load_shards(trainer, m, dir);
        load_managed_collision(trainer, m, dir);
    });
    trainer.managed_collision().loaded();  // a collective of its own, once every rank has loaded
    log::root().info("loaded checkpoint {}: step {}, written by {} rank(s)", dir, m.step,
                     m.world_size);
    if (options.taken != nullptr)
        *options.taken = dir;
    if (options.resume) {
        if (m.global_batch_size != trainer.global_batch_size()) {
            log::root().warn(
                "resuming at step {} with a global batch of {} samples (the checkpoint's was {}): "
                "the data continues from sample {}, the next one not yet trained on; the same "
                "global batch would continue bitwise",
                m.step, trainer.global_batch_size(), m.global_batch_size, m.samples);
        }
        trainer.set_data_position(m.step, m.samples);
    }
    return m.step;
}

}  // namespace shardrec::train
