#include "engine/train/managed_collision_tables.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "engine/core/error.h"
#include "engine/modules/embedding_config.h"

namespace shardrec::train {

ManagedCollisionOptions managed_collision_options(const ModelConfig::Table& t, uint64_t seed) {
    const ModelConfig::Table::ManagedCollision& mc = t.managed_collision;
    ManagedCollisionOptions o;
    o.zch_size = mc.zch_size;
    SR_CHECK(parse_eviction_policy(mc.eviction_policy, &o.eviction_policy),
             "table '{}': managed_collision.eviction_policy '{}' is not lfu, lru or distance_lfu",
             t.name, mc.eviction_policy);
    o.eviction_interval = mc.eviction_interval;
    const std::string problem = parse_threshold_filter(mc.threshold, &o.threshold);
    SR_CHECK(problem.empty(), "table '{}': managed_collision.threshold: {}", t.name, problem);
    if (mc.input_hash_size > 0)
        o.input_hash_size = static_cast<uint64_t>(mc.input_hash_size);
    o.mch_size = mc.mch_size;
    o.seed = seed;
    return o;
}

ManagedCollisionTables::ManagedCollisionTables(const ModelConfig& model,
                                               uint64_t seed,
                                               std::shared_ptr<comm::ProcessGroup> pg)
    : seed_(seed), pg_(std::move(pg)) {
    for (size_t i = 0; i < model.tables.size(); ++i) {
        const ModelConfig::Table& t = model.tables[i];
        if (t.managed_collision.zch_size == 0)
            continue;
        Table table;
        table.name = t.name;
        table.index = static_cast<int64_t>(i);
        table.num_embeddings = t.num_embeddings;
        table.features = t.feature_names;
        table.module =
            std::make_unique<MCHManagedCollisionModule>(t.name, managed_collision_options(t, seed));
        tables_.push_back(std::move(table));
    }
}

namespace {

bool is_managed(const std::vector<std::string>& features, const std::string& key) {
    return std::find(features.begin(), features.end(), key) != features.end();
}

// The batch with `values` in place of its KJT's ids.
Batch with_values(const Batch& batch, const Tensor& values) {
    return Batch{batch.dense, batch.sparse.with_values(values), batch.labels};
}

// Calls map(ids, n, out) once per managed table with the ids of all its features (in KJT order),
// writing the rows into a copy of the values; the other features keep their ids.
template <typename Tables, typename Map>
Batch remap_batch(const Batch& batch,
                  Tables& tables,
                  std::vector<int64_t>& ids,
                  std::vector<int64_t>& rows,
                  Map&& map) {
    const KeyedJaggedTensor& kjt = batch.sparse;
    SR_CHECK(kjt.values().device().is_cpu(),
             "managed collision: the batch's ids must be on the host before the remap");
    Tensor values = kjt.values().clone();
    int64_t* v = values.data<int64_t>();
    for (auto& t : tables) {
        ids.clear();
        std::vector<int64_t> keys;  // positions of the table's features in the KJT
        for (int64_t f = 0; f < kjt.num_keys(); ++f) {
            if (!is_managed(t.features, kjt.keys()[f]))
                continue;
            keys.push_back(f);
            ids.insert(ids.end(), v + kjt.offset_per_key()[f], v + kjt.offset_per_key()[f + 1]);
        }
        rows.resize(ids.size());
        map(t, ids.data(), static_cast<int64_t>(ids.size()), rows.data());
        size_t k = 0;
        for (int64_t f : keys) {
            for (int64_t n = kjt.offset_per_key()[f]; n < kjt.offset_per_key()[f + 1]; ++n)
                v[n] = rows[k++];
        }
    }
    return with_values(batch, values);
}

// Several ranks: the module steps on the ids of the global batch, so that every rank's remap
// state stays the one of a single process reading that batch. The managed features' bags of all
// ranks are gathered (key, then rank 0's samples, rank 1's, ...: one process's order, the ids of a
// table in the same order as remap_batch gives them), map(ids, n, out) runs once per table on the
// global ids, and each rank writes the rows of its own bags into a copy of its values.
template <typename Tables, typename Map>
Batch remap_global_batch(const Batch& batch,
                         comm::ProcessGroup& pg,
                         Tables& tables,
                         KJTAllGatherBuffers& buf,
                         std::vector<int64_t>& ids,
                         std::vector<int64_t>& rows,
                         Map&& map) {
    const KeyedJaggedTensor& kjt = batch.sparse;
    SR_CHECK(kjt.values().device().is_cpu(),
             "managed collision: the batch's ids must be on the host before the remap");
    SR_CHECK(!kjt.variable_stride_per_key(),
             "managed collision: rank {}'s training batch has a batch size per feature; the "
             "global remap needs one batch size for every feature",
             pg.rank());
    const int64_t B = kjt.stride();
    const int64_t* lengths = kjt.lengths().data<int64_t>();
    const int64_t* v_in = kjt.values().data<int64_t>();
    std::vector<std::string> keys;  // the managed features, in KJT order
    std::vector<int64_t> at;        // their positions in the KJT
    std::vector<int64_t> my_lengths, my_values;
    for (int64_t f = 0; f < kjt.num_keys(); ++f) {
        const auto& key = kjt.keys()[static_cast<size_t>(f)];
        if (std::none_of(tables.begin(), tables.end(),
                         [&](const auto& t) { return is_managed(t.features, key); }))
            continue;
        keys.push_back(key);
        at.push_back(f);
        my_lengths.insert(my_lengths.end(), lengths + f * B, lengths + (f + 1) * B);
        my_values.insert(my_values.end(), v_in + kjt.offset_per_key()[f],
                         v_in + kjt.offset_per_key()[f + 1]);
    }
    const auto from = [](const std::vector<int64_t>& a) {
        Tensor t = Tensor::empty({static_cast<int64_t>(a.size())}, DType::kI64);
        if (!a.empty())
            std::memcpy(t.data_ptr(), a.data(), a.size() * sizeof(int64_t));
        return t;
    };
    const KeyedJaggedTensor mine =
        KeyedJaggedTensor::from_lengths_sync(keys, from(my_values), from(my_lengths), {}, B);
    const GatheredKJT g = all_gather_kjt(pg, mine, nullptr, buf);
    const int64_t Bg = g.stride;
    int64_t first_bag = 0;  // this rank's first sample in the global batch
    for (int r = 0; r < pg.rank(); ++r)
        first_bag += g.batch_size_per_rank[static_cast<size_t>(r)];
    const int64_t* go = g.offsets.data<int64_t>();
    const int64_t* gv = g.values.data<int64_t>();

    Tensor values = kjt.values().clone();
    int64_t* v = values.data<int64_t>();
    for (auto& t : tables) {
        ids.clear();
        std::vector<int64_t> ks;  // indices into keys of the table's features
        for (size_t k = 0; k < keys.size(); ++k) {
            if (!is_managed(t.features, keys[k]))
                continue;
            ks.push_back(static_cast<int64_t>(k));
            ids.insert(ids.end(), gv + go[k * Bg], gv + go[(k + 1) * Bg]);
        }
        rows.resize(ids.size());
        map(t, ids.data(), static_cast<int64_t>(ids.size()), rows.data());
        int64_t base = 0;  // the key's first id in `ids`
        for (int64_t k : ks) {
            const int64_t f = at[static_cast<size_t>(k)];
            const int64_t lo = go[k * Bg + first_bag], hi = go[k * Bg + first_bag + B];
            SR_CHECK(hi - lo == kjt.offset_per_key()[f + 1] - kjt.offset_per_key()[f],
                     "managed collision: rank {} gathered {} ids of feature '{}', it has {}",
                     pg.rank(), hi - lo, keys[static_cast<size_t>(k)],
                     kjt.offset_per_key()[f + 1] - kjt.offset_per_key()[f]);
            std::copy(rows.begin() + base + (lo - go[k * Bg]),
                      rows.begin() + base + (hi - go[k * Bg]), v + kjt.offset_per_key()[f]);
            base += go[(k + 1) * Bg] - go[k * Bg];
        }
    }
    return with_values(batch, values);
}

}  // namespace

Batch ManagedCollisionTables::remap_train(const Batch& batch,
                                          EmbeddingBagCollectionInterface& sparse,
                                          Stream& stream) {
    const auto step = [&](Table& t, const int64_t* ids, int64_t n, int64_t* out) {
        MCHManagedCollisionModule& m = *t.module;
        m.forward(ids, n, out);
        // Slots 0 .. usable_slots - 1 are owned by ids; the unmapped ids go above them.
        const int64_t first = m.options().output_global_offset, owned = m.usable_slots();
        t.ids_seen += n;
        for (int64_t i = 0; i < n; ++i)
            t.hits_seen += out[i] - first < owned ? 1 : 0;
        reset_rows(t, m.evict(), sparse, stream);
        if (m.step() % m.options().eviction_interval != 0)
            return;
        records_.push_back(
            {t.name, m.step(), m.occupancy(), m.usable_slots(),
             m.evictions_total() - t.evictions_seen, m.admissions_total() - t.admissions_seen,
             t.ids_seen > 0 ? static_cast<double>(t.hits_seen) / static_cast<double>(t.ids_seen)
                            : 0.0});
        t.evictions_seen = m.evictions_total();
        t.admissions_seen = m.admissions_total();
        t.ids_seen = t.hits_seen = 0;
    };
    if (pg_ != nullptr && pg_->size() > 1)
        return remap_global_batch(batch, *pg_, tables_, gather_, ids_, rows_, step);
    return remap_batch(batch, tables_, ids_, rows_, step);
}

Batch ManagedCollisionTables::remap_eval(const Batch& batch) const {
    std::vector<int64_t> ids, rows;
    return remap_batch(batch, tables_, ids, rows,
                       [](const Table& t, const int64_t* in, int64_t n, int64_t* out) {
                           t.module->remap(in, n, out);
                       });
}

// The same values as at the start (init_embedding_rows, the tables' own init) and a fused
// optimizer state of zero: a new id starts from a fresh row, as TorchRec's MC-EBC resets it.
void ManagedCollisionTables::reset_rows(const Table& t,
                                        const std::vector<int64_t>& rows,
                                        EmbeddingBagCollectionInterface& sparse,
                                        Stream& stream) const {
    if (rows.empty())
        return;
    // On a GPU the steps before may still update these rows: the reset comes after them, and
    // is done (each write synchronous) before the next step's kernels are enqueued.
    stream.synchronize();
    for (EmbeddingShardState& s : sparse.shard_states()) {
        if (s.table != t.index)
            continue;
        SR_CHECK(s.cached == nullptr,
                 "table '{}': managed collision does not run with a key_value shard yet", t.name);
        for (int64_t row : rows) {
            if (row < s.row_offset || row >= s.row_offset + s.rows)
                continue;
            const int64_t r = row - s.row_offset;
            Tensor w = s.weight.slice(r, r + 1);
            init_embedding_rows(w, seed_, t.index, row, s.col_offset, t.num_embeddings);
            for (Tensor& state : s.optimizer_state) {
                Tensor part = state.slice(r, r + 1);
                part.zero_();
            }
        }
    }
}

// Layout: [step, slots, window, pending, evictions_total, admissions_total, slot_ids,
// slot_counts, slot_lasts, window_ids, window_counts, window_lasts, pending_evictions].
Tensor ManagedCollisionTables::state_tensor(size_t i) const {
    const ManagedCollisionState s = tables_[i].module->state();
    std::vector<int64_t> out{s.step,
                             static_cast<int64_t>(s.slot_ids.size()),
                             static_cast<int64_t>(s.window_ids.size()),
                             static_cast<int64_t>(s.pending_evictions.size()),
                             s.evictions_total,
                             s.admissions_total};
    const auto put_u = [&](const std::vector<uint64_t>& a) {
        for (uint64_t x : a)
            out.push_back(static_cast<int64_t>(x));
    };
    const auto put = [&](const std::vector<int64_t>& a) {
        out.insert(out.end(), a.begin(), a.end());
    };
    put_u(s.slot_ids);
    put(s.slot_counts);
    put(s.slot_lasts);
    put_u(s.window_ids);
    put(s.window_counts);
    put(s.window_lasts);
    put(s.pending_evictions);
    Tensor t = Tensor::empty({static_cast<int64_t>(out.size())}, DType::kI64);
    std::memcpy(t.data_ptr(), out.data(), out.size() * sizeof(int64_t));
    return t;
}

Tensor ManagedCollisionTables::id_to_row(const Tensor& state, const std::string& where) {
    const int64_t* p = state.data<int64_t>();
    const int64_t n = state.numel();
    SR_CHECK(n >= 6 && p[1] >= 0 && 6 + p[1] <= n,
             "{}: not a managed-collision state ({} values, {} slots in its header)", where, n,
             n >= 2 ? p[1] : -1);
    const int64_t slots = p[1];
    Tensor out = Tensor::empty({slots, 2}, DType::kI64);
    int64_t* o = out.data<int64_t>();
    for (int64_t s = 0; s < slots; ++s) {
        o[2 * s] = p[6 + s];  // slot_ids come right after the header (state_tensor)
        o[2 * s + 1] = s;
    }
    return out;
}

void ManagedCollisionTables::load_state_tensor(size_t i,
                                               const Tensor& t,
                                               const std::string& where) {
    const int64_t* p = t.data<int64_t>();
    const int64_t n = t.numel();
    SR_CHECK(n >= 6,
             "{}: the managed-collision state of table '{}' has {} values, not the 6 of "
             "its header",
             where, tables_[i].name, n);
    ManagedCollisionState s;
    s.step = p[0];
    const int64_t slots = p[1], window = p[2], pending = p[3];
    s.evictions_total = p[4];
    s.admissions_total = p[5];
    SR_CHECK(slots >= 0 && window >= 0 && pending >= 0 && n == 6 + 3 * slots + 3 * window + pending,
             "{}: the managed-collision state of table '{}' has {} values, its header says {} "
             "slots, {} window ids and {} pending rows",
             where, tables_[i].name, n, slots, window, pending);
    int64_t k = 6;
    const auto take_u = [&](std::vector<uint64_t>& a, int64_t m) {
        for (int64_t j = 0; j < m; ++j)
            a.push_back(static_cast<uint64_t>(p[k++]));
    };
    const auto take = [&](std::vector<int64_t>& a, int64_t m) {
        a.assign(p + k, p + k + m);
        k += m;
    };
    take_u(s.slot_ids, slots);
    take(s.slot_counts, slots);
    take(s.slot_lasts, slots);
    take_u(s.window_ids, window);
    take(s.window_counts, window);
    take(s.window_lasts, window);
    take(s.pending_evictions, pending);
    Table& table = tables_[i];
    table.module->load_state(s);
    table.evictions_seen = s.evictions_total;
    table.admissions_seen = s.admissions_total;
}

}  // namespace shardrec::train
