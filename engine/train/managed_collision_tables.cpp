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

ManagedCollisionTables::ManagedCollisionTables(const ModelConfig& model, uint64_t seed)
    : seed_(seed) {
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
            if (std::find(t.features.begin(), t.features.end(), kjt.keys()[f]) == t.features.end())
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
    KeyedJaggedTensor sparse =
        kjt.variable_stride_per_key()
            ? KeyedJaggedTensor::from_lengths_variable_stride(
                  kjt.keys(), values, kjt.lengths(), kjt.stride_per_key(), kjt.weights_or_none())
            : KeyedJaggedTensor::from_offsets_sync(kjt.keys(), values, kjt.offsets(),
                                                   kjt.weights_or_none(), kjt.stride());
    return Batch{batch.dense, std::move(sparse), batch.labels};
}

}  // namespace

Batch ManagedCollisionTables::remap_train(const Batch& batch,
                                          EmbeddingBagCollectionInterface& sparse) {
    return remap_batch(batch, tables_, ids_, rows_,
                       [&](Table& t, const int64_t* ids, int64_t n, int64_t* out) {
                           MCHManagedCollisionModule& m = *t.module;
                           m.forward(ids, n, out);
                           reset_rows(t, m.evict(), sparse);
                           if (m.step() % m.options().eviction_interval != 0)
                               return;
                           records_.push_back({t.name, m.step(), m.occupancy(), m.usable_slots(),
                                               m.evictions_total() - t.evictions_seen,
                                               m.admissions_total() - t.admissions_seen});
                           t.evictions_seen = m.evictions_total();
                           t.admissions_seen = m.admissions_total();
                       });
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
                                        EmbeddingBagCollectionInterface& sparse) const {
    if (rows.empty())
        return;
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
