#include "engine/train/managed_collision_tables.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "engine/core/cache_line.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/modules/embedding_config.h"
#include "kernels/elementwise.h"
#include "kernels/embedding_init.h"
#include "kernels/threads.h"

namespace shardrec::train {

ManagedCollisionOptions managed_collision_options(const ModelConfig::Table& t,
                                                  uint64_t seed,
                                                  int64_t bucket) {
    const ModelConfig::Table::ManagedCollision& mc = t.managed_collision;
    const int64_t k = mc.total_num_buckets;
    SR_CHECK(k >= 1 && mc.zch_size % k == 0 && mc.mch_size % k == 0 && bucket >= 0 && bucket < k,
             "table '{}': managed_collision zch_size {} and mch_size {} do not split into {} "
             "buckets (bucket {})",
             t.name, mc.zch_size, mc.mch_size, k, bucket);
    ManagedCollisionOptions o;
    o.zch_size = mc.zch_size / k;
    SR_CHECK(parse_eviction_policy(mc.eviction_policy, &o.eviction_policy),
             "table '{}': managed_collision.eviction_policy '{}' is not lfu, lru or distance_lfu",
             t.name, mc.eviction_policy);
    o.decay_exponent = mc.decay_exponent;
    o.eviction_interval = mc.eviction_interval;
    const std::string problem = parse_threshold_filter(mc.threshold, &o.threshold);
    SR_CHECK(problem.empty(), "table '{}': managed_collision.threshold: {}", t.name, problem);
    if (mc.input_hash_size > 0)
        o.input_hash_size = static_cast<uint64_t>(mc.input_hash_size);
    o.mch_size = mc.mch_size / k;
    o.output_global_offset = bucket * (o.zch_size + o.mch_size);
    o.seed = seed;
    return o;
}

namespace {

// A table whose rows are split by row over more ranks than its buckets' owners: the remap of every
// id runs on those few ranks, its state apart from most of the rows (a bucket lives with its first
// row). Said once, on rank 0, with the value that would spread it.
void warn_remap_apart(const ModelConfig::Table& t,
                      const ParameterSharding& sharding,
                      const std::vector<int>& owners) {
    std::vector<int> holders = sharding.ranks, keepers = owners;
    for (std::vector<int>* v : {&holders, &keepers}) {
        std::sort(v->begin(), v->end());
        v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    const bool by_rows = sharding.sharding_type == ShardingType::kRowWise ||
                         sharding.sharding_type == ShardingType::kTableRowWise;
    if (!by_rows || keepers.size() >= holders.size())
        return;
    log::root().warn(
        "table '{}': its rows are on {} ranks, its managed-collision state on {} "
        "(total_num_buckets "
        "{}; a bucket lives on the rank of its first row), so the remap of all its ids runs there; "
        "model.tables[].managed_collision.total_num_buckets a multiple of {} keeps each rank's "
        "remap with its rows (choose it before the first checkpoint: a checkpoint's buckets stay)",
        t.name, holders.size(),
        keepers.size() == 1 ? fmt::format("rank {}", keepers[0])
                            : fmt::format("{} ranks", keepers.size()),
        t.managed_collision.total_num_buckets, holders.size());
}

}  // namespace

ManagedCollisionTables::ManagedCollisionTables(const ModelConfig& model,
                                               uint64_t seed,
                                               std::shared_ptr<comm::ProcessGroup> pg,
                                               const ShardingPlan* plan)
    : seed_(seed), pg_(std::move(pg)), rank_(pg_ ? pg_->rank() : 0) {
    for (size_t i = 0; i < model.tables.size(); ++i) {
        const ModelConfig::Table& t = model.tables[i];
        if (t.managed_collision.zch_size == 0)
            continue;
        Table table;
        table.name = t.name;
        table.index = static_cast<int64_t>(i);
        table.num_embeddings = t.num_embeddings;
        table.eviction_interval = t.managed_collision.eviction_interval;
        table.features = t.feature_names;
        table.owner = bucket_owners(plan != nullptr ? &plan->at(t.name) : nullptr, t);
        if (plan != nullptr && rank_ == 0)
            warn_remap_apart(t, plan->at(t.name), table.owner);
        for (size_t b = 0; b < table.owner.size(); ++b) {
            const ManagedCollisionOptions o =
                managed_collision_options(t, seed, static_cast<int64_t>(b));
            table.input_hash_size = o.input_hash_size;
            table.seen.emplace_back();
            table.modules.push_back(table.owner[b] == rank_
                                        ? std::make_unique<MCHManagedCollisionModule>(t.name, o)
                                        : nullptr);
        }
        tables_.push_back(std::move(table));
    }
}

bool ManagedCollisionTables::owns(size_t i, int64_t bucket) const {
    return tables_[i].modules.at(static_cast<size_t>(bucket)) != nullptr;
}

const MCHManagedCollisionModule& ManagedCollisionTables::module(size_t i, int64_t bucket) const {
    SR_CHECK(owns(i, bucket), "table '{}': rank {} does not keep managed-collision bucket {}",
             tables_[i].name, rank_, bucket);
    return *tables_[i].modules[static_cast<size_t>(bucket)];
}

namespace {

// Ids of tables of several buckets a batch from which the route bins them on the CPU threads.
constexpr int64_t kParallelSingles = 4096;

bool is_managed(const std::vector<std::string>& features, const std::string& key) {
    return std::find(features.begin(), features.end(), key) != features.end();
}

// a as an i64 tensor: in *buffer (grow-only) when given, else in one of its own.
Tensor i64_tensor(const std::vector<int64_t>& a, Tensor* buffer = nullptr) {
    const auto n = static_cast<int64_t>(a.size());
    Tensor t =
        buffer != nullptr ? grow_prefix(*buffer, n, DType::kI64) : Tensor::empty({n}, DType::kI64);
    if (!a.empty())
        std::memcpy(t.data_ptr(), a.data(), a.size() * sizeof(int64_t));
    return t;
}

// One all-to-all of i64 segments (send[r] elements to rank r, recv[r] from it) into `buffer`
// (grow-only); one process keeps its own.
Tensor exchange(comm::ProcessGroup* pg,
                const Tensor& input,
                const std::vector<int64_t>& send,
                const std::vector<int64_t>& recv,
                Tensor& buffer) {
    if (pg == nullptr || pg->size() == 1)
        return input;
    int64_t n = 0;
    for (int64_t c : recv)
        n += c;
    Tensor out = grow_prefix(buffer, n, DType::kI64);
    pg->all_to_all_v(input, send, out, recv).wait();
    return out;
}

// A run of a one-bucket table: a feature's values, sent together.
struct Run {
    int64_t at;    // first value in the KJT
    int64_t len;   // values
    int64_t cell;  // owner rank * B + the bucket's cell, then the run's place in out_ids
};

// to_place(r) = true: copies each run's values from src + r.at to dst + r.cell, else from
// src + r.cell to dst + r.at; the runs' values split evenly over the CPU threads (a batch's ids
// are a few hundred KB, one thread copies them at a fraction of the memory's rate).
void copy_runs(const std::vector<Run>& runs, const int64_t* src, int64_t* dst, bool to_place) {
    int64_t total = 0;
    for (const Run& r : runs)
        total += r.len;
    const int64_t chunks = total >= kParallelSingles ? kernels::cpu_threads() : 1;
    kernels::parallel_tasks(chunks, [&](int64_t c) {
        const int64_t first = total * c / chunks, end = total * (c + 1) / chunks;
        int64_t at = 0;  // the first value of run r among all the runs' values
        for (const Run& r : runs) {
            const int64_t lo = std::max(first, at) - at, hi = std::min(end, at + r.len) - at;
            if (lo < hi) {
                const int64_t from = to_place ? r.at : r.cell, to = to_place ? r.cell : r.at;
                std::copy_n(src + from + lo, hi - lo, dst + to + lo);
            }
            at += r.len;
        }
    });
}

}  // namespace

// One process bins each table's ids for its buckets' modules where they lie in the batch, and the
// modules write the rows in place. Several: the sender groups its ids by owner, then table and
// bucket (in KJT order within each), the owners learn how many of each table's bucket come from
// each rank, remap each owned bucket's ids where they arrived and send the rows back in the order
// they came. A table of one bucket sends each of its features' segments as one run (copies, no
// work an id); a table of several buckets its ids one by one, to the bucket the sender hashed
// each to. Every owned bucket is called, so each steps once per batch with or without ids.
template <typename Tables, typename Map>
Batch ManagedCollisionTables::route(
    const Batch& batch, comm::ProcessGroup* pg, Tables& tables, RouteBuffers& buffers, Map&& map) {
    const KeyedJaggedTensor& kjt = batch.sparse;
    SR_CHECK(kjt.values().device().is_cpu(),
             "managed collision: the batch's ids must be on the host before the remap");
    const int W = pg != nullptr ? pg->size() : 1, me = pg != nullptr ? pg->rank() : 0;
    const auto T = static_cast<int64_t>(tables.size());
    // A rank's cells: each table's buckets one after another, table ti's from first_bucket[ti].
    std::vector<int64_t> first_bucket(static_cast<size_t>(T + 1), 0);
    for (int64_t ti = 0; ti < T; ++ti) {
        first_bucket[static_cast<size_t>(ti + 1)] =
            first_bucket[static_cast<size_t>(ti)] +
            static_cast<int64_t>(tables[static_cast<size_t>(ti)].owner.size());
    }
    const int64_t B = first_bucket[static_cast<size_t>(T)];
    // The remapped batch's values: the managed features' rows come back below, the others are
    // copied as they are.
    Tensor values = grow_prefix(buffers.values.acquire().values, kjt.values().numel(), DType::kI64);
    const int64_t* kv = kjt.values().data<int64_t>();
    int64_t* v = values.data<int64_t>();
    for (int64_t f = 0; f < kjt.num_keys(); ++f) {
        const std::string& key = kjt.keys()[static_cast<size_t>(f)];
        if (std::none_of(tables.begin(), tables.end(),
                         [&](const auto& t) { return is_managed(t.features, key); })) {
            const int64_t lo = kjt.offset_per_key()[f], hi = kjt.offset_per_key()[f + 1];
            std::copy(kv + lo, kv + hi, v + lo);
        }
    }

    if (W == 1) {
        // One process keeps every bucket: a table's ids are binned for its buckets' modules
        // straight from the KJT's values, and the modules write the rows into the new ones.
        if (buffers.bins.size() < static_cast<size_t>(T))
            buffers.bins.resize(static_cast<size_t>(T));
        std::vector<std::pair<int64_t, int64_t>> all;  // (table, bucket)
        for (int64_t ti = 0; ti < T; ++ti) {
            const auto& t = tables[static_cast<size_t>(ti)];
            std::vector<ManagedCollisionRange> ranges;
            for (int64_t f = 0; f < kjt.num_keys(); ++f) {
                const int64_t lo = kjt.offset_per_key()[f], hi = kjt.offset_per_key()[f + 1];
                if (is_managed(t.features, kjt.keys()[static_cast<size_t>(f)]))
                    ranges.push_back({kv + lo, hi - lo, static_cast<size_t>(lo)});
            }
            const auto K = static_cast<int64_t>(t.owner.size());
            buffers.bins[static_cast<size_t>(ti)].bin(ranges, t.input_hash_size, K);
            for (int64_t b = 0; b < K; ++b) {
                SR_CHECK(t.modules[static_cast<size_t>(b)] != nullptr,
                         "managed collision: table '{}' bucket {} is kept by rank {}, not this "
                         "process",
                         t.name, b, t.owner[static_cast<size_t>(b)]);
                all.emplace_back(ti, b);
            }
        }
        kernels::parallel_tasks(static_cast<int64_t>(all.size()), [&](int64_t j) {
            const auto [ti, b] = all[static_cast<size_t>(j)];
            map(tables[static_cast<size_t>(ti)], b, buffers.bins[static_cast<size_t>(ti)].bucket(b),
                v);
        });
        return Batch{batch.dense, batch.sparse.with_values(values), batch.labels};
    }

    std::vector<Run> runs;  // one-bucket tables: a run a feature

    struct Segment {
        int64_t lo, hi, table;  // a feature's values of a table of several buckets
    };

    std::vector<Segment> segments;
    std::vector<int64_t> send_counts(static_cast<size_t>(W * B), 0);
    for (int64_t ti = 0; ti < T; ++ti) {
        const auto& t = tables[static_cast<size_t>(ti)];
        const int64_t base = first_bucket[static_cast<size_t>(ti)];
        for (int64_t f = 0; f < kjt.num_keys(); ++f) {
            if (!is_managed(t.features, kjt.keys()[static_cast<size_t>(f)]))
                continue;
            const int64_t lo = kjt.offset_per_key()[f], hi = kjt.offset_per_key()[f + 1];
            if (t.owner.size() > 1) {
                segments.push_back({lo, hi, ti});
                continue;
            }
            const int64_t cell = t.owner[0] * B + base;
            send_counts[static_cast<size_t>(cell)] += hi - lo;
            if (hi > lo)
                runs.push_back({lo, hi - lo, cell});
        }
    }
    // The segments' ids one by one, in order: each id's bucket and cell found on the CPU threads,
    // a contiguous chunk each, with the chunk's counts per cell (chunk_counts[chunk * stride +
    // cell], a chunk's counts on lines of their own), so the places given below are those of one
    // pass in order (a stable counting sort).
    std::vector<int64_t> segment_at(segments.size() + 1, 0);
    for (size_t s = 0; s < segments.size(); ++s)
        segment_at[s + 1] = segment_at[s] + segments[s].hi - segments[s].lo;
    const int64_t num_singles = segment_at.back();
    using Single = RouteBuffers::Single;
    if (buffers.singles.size() < static_cast<size_t>(num_singles))
        buffers.singles.resize(static_cast<size_t>(num_singles));
    Single* singles = buffers.singles.data();
    const int64_t chunks = num_singles >= kParallelSingles ? kernels::cpu_threads() : 1;
    const auto cells = static_cast<size_t>(W * B);
    const size_t stride = own_lines_stride(cells);
    std::vector<int64_t> chunk_counts(static_cast<size_t>(chunks) * stride, 0);
    const auto chunk_range = [&](int64_t c) {
        return std::pair<int64_t, int64_t>{num_singles * c / chunks,
                                           num_singles * (c + 1) / chunks};
    };
    kernels::parallel_tasks(chunks, [&](int64_t c) {
        const auto [first, end] = chunk_range(c);
        int64_t* counts = chunk_counts.data() + static_cast<size_t>(c) * stride;
        // Segment by segment, its table's constants in locals (a store to singles may alias any
        // int64 the loop reads, which would then be read again for each id).
        auto s = static_cast<size_t>(std::upper_bound(segment_at.begin(), segment_at.end(), first) -
                                     segment_at.begin() - 1);
        for (; s < segments.size() && segment_at[s] < end; ++s) {
            const Segment seg = segments[s];
            const auto& t = tables[static_cast<size_t>(seg.table)];
            const auto K = static_cast<int64_t>(t.owner.size());
            const uint64_t hash_size = t.input_hash_size;
            const int* owner = t.owner.data();
            const int64_t base = first_bucket[static_cast<size_t>(seg.table)];
            const int64_t lo = std::max(first, segment_at[s]),
                          hi = std::min(end, segment_at[s + 1]);
            const int64_t shift = seg.lo - segment_at[s];
            for (int64_t i = lo; i < hi; ++i) {
                const int64_t n = i + shift;
                const int64_t b = managed_collision_bucket(kv[n], hash_size, K);
                const int64_t cell = owner[b] * B + base + b;
                singles[i] = {n, cell};
                ++counts[cell];
            }
        }
    });
    for (int64_t c = 0; c < chunks; ++c) {
        for (size_t cell = 0; cell < cells; ++cell)
            send_counts[cell] += chunk_counts[static_cast<size_t>(c) * stride + cell];
    }
    std::vector<int64_t> cell_at(send_counts.size(), 0), send(static_cast<size_t>(W), 0);
    int64_t total = 0;
    for (size_t c = 0; c < send_counts.size(); ++c) {
        cell_at[c] = total;
        total += send_counts[c];
        send[c / static_cast<size_t>(B)] += send_counts[c];
    }
    Tensor out_ids = grow_prefix(buffers.send_ids, total, DType::kI64);
    int64_t* o = out_ids.data<int64_t>();
    for (Run& r : runs) {
        const int64_t place = cell_at[static_cast<size_t>(r.cell)];
        cell_at[static_cast<size_t>(r.cell)] += r.len;
        r.cell = place;
    }
    copy_runs(runs, kv, o, true);
    // Each chunk's first place in each cell (runs and singles never share a cell), then the
    // singles to their places, on the threads.
    for (size_t cell = 0; cell < cells; ++cell) {
        for (int64_t c = 0; c < chunks; ++c) {
            int64_t& count = chunk_counts[static_cast<size_t>(c) * stride + cell];
            count = std::exchange(cell_at[cell], cell_at[cell] + count);
        }
    }
    kernels::parallel_tasks(chunks, [&](int64_t c) {
        const auto [first, end] = chunk_range(c);
        int64_t* place = chunk_counts.data() + static_cast<size_t>(c) * stride;
        for (int64_t i = first; i < end; ++i) {
            Single& one = singles[i];
            one.cell = place[one.cell]++;
            o[one.cell] = kv[one.at];
        }
    });
    const std::vector<int64_t> per_rank(static_cast<size_t>(W), B);
    const Tensor counts_in = exchange(pg, i64_tensor(send_counts, &buffers.send_counts), per_rank,
                                      per_rank, buffers.recv_counts);
    const int64_t* rc = counts_in.data<int64_t>();  // [W, B]: ids of each bucket from each rank
    std::vector<int64_t> recv(static_cast<size_t>(W), 0), seg_at(static_cast<size_t>(W * B), 0);
    for (int64_t c = 0, at = 0; c < W * B; ++c) {
        recv[static_cast<size_t>(c / B)] += rc[c];
        seg_at[static_cast<size_t>(c)] = at;
        at += rc[c];
    }
    const Tensor in_ids = exchange(pg, out_ids, send, recv, buffers.recv_ids);
    const int64_t* in = in_ids.data<int64_t>();
    Tensor rows = grow_prefix(buffers.rows, in_ids.numel(), DType::kI64);
    int64_t* rows_out = rows.data<int64_t>();

    // Each owned bucket (on the CPU threads at once): its ids from every rank, one segment a
    // rank, remapped together (one process: the segment as it is).
    std::vector<std::pair<int64_t, int64_t>> owned;  // (table, bucket)
    for (int64_t ti = 0; ti < T; ++ti) {
        const auto& t = tables[static_cast<size_t>(ti)];
        for (size_t b = 0; b < t.owner.size(); ++b) {
            const int64_t cell = first_bucket[static_cast<size_t>(ti)] + static_cast<int64_t>(b);
            if (t.owner[b] == me) {
                owned.emplace_back(ti, static_cast<int64_t>(b));
                continue;
            }
            for (int64_t r = 0; r < W; ++r) {
                SR_CHECK(rc[r * B + cell] == 0,
                         "managed collision: rank {} got {} ids of table '{}' bucket {} from rank "
                         "{}, which rank {} keeps",
                         me, rc[r * B + cell], t.name, b, r, t.owner[b]);
            }
        }
    }
    if (buffers.bins.size() < owned.size())
        buffers.bins.resize(owned.size());
    kernels::parallel_tasks(static_cast<int64_t>(owned.size()), [&](int64_t j) {
        const auto [ti, b] = owned[static_cast<size_t>(j)];
        auto& t = tables[static_cast<size_t>(ti)];
        const int64_t cell = first_bucket[static_cast<size_t>(ti)] + b;
        std::vector<ManagedCollisionRange> ranges;
        for (int64_t r = 0; r < W; ++r) {
            const int64_t at = seg_at[static_cast<size_t>(r * B + cell)];
            ranges.push_back({in + at, rc[r * B + cell], static_cast<size_t>(at)});
        }
        ManagedCollisionBins& bins = buffers.bins[static_cast<size_t>(j)];
        bins.bin(ranges, t.input_hash_size, 1);
        map(t, b, bins.bucket(0), rows_out);
    });

    const Tensor back = exchange(pg, rows, recv, send, buffers.back);
    const int64_t* bk = back.data<int64_t>();
    copy_runs(runs, bk, v, false);
    kernels::parallel_tasks(chunks, [&](int64_t c) {
        const auto [first, end] = chunk_range(c);
        for (int64_t i = first; i < end; ++i) {
            const Single& one = singles[i];
            v[one.at] = bk[one.cell];
        }
    });
    return Batch{batch.dense, batch.sparse.with_values(values), batch.labels};
}

Batch ManagedCollisionTables::remap_train(const Batch& batch, ManagedCollisionEvictions* evicted) {
    const auto step = [](Table& t, int64_t b, const ManagedCollisionIds& ids, int64_t* out) {
        MCHManagedCollisionModule& m = *t.modules[static_cast<size_t>(b)];
        Table::Seen& seen = t.seen[static_cast<size_t>(b)];
        seen.hits += m.forward(ids, out);
        seen.ids += static_cast<int64_t>(ids.size());
        const std::vector<int64_t> gone = m.evict();
        seen.evicted.insert(seen.evicted.end(), gone.begin(), gone.end());
    };
    Batch out = route(batch, pg_.get(), tables_, train_buffers_, step);
    for (Table& t : tables_)
        ++t.step;
    record(evicted);
    return out;
}

Batch ManagedCollisionTables::remap_train(const Batch& batch,
                                          EmbeddingBagCollectionInterface& sparse,
                                          Stream& stream) {
    ManagedCollisionEvictions evicted;
    Batch out = remap_train(batch, &evicted);
    reset_evicted(evicted, sparse, stream);
    return out;
}

void ManagedCollisionTables::reset_evicted(const ManagedCollisionEvictions& evicted,
                                           EmbeddingBagCollectionInterface& sparse,
                                           Stream& stream) {
    for (const auto& [i, rows] : evicted.tables)
        reset_rows(tables_[i], rows, sparse, stream);
}

Batch ManagedCollisionTables::remap_eval(const Batch& batch) {
    return route(batch, pg_.get(), std::as_const(tables_), eval_buffers_,
                 [](const Table& t, int64_t b, const ManagedCollisionIds& ids, int64_t* out) {
                     t.modules[static_cast<size_t>(b)]->remap(ids, out);
                 });
}

// At a table's eviction step (all ranks agree: every table steps once per batch), every rank's
// counts of its owned buckets and their evicted rows are gathered: each rank records the table's
// totals and gets every evicted row (it resets those of the shards it holds).
void ManagedCollisionTables::record(ManagedCollisionEvictions* evicted) {
    std::vector<size_t> due;
    std::vector<int64_t> mine;
    for (size_t i = 0; i < tables_.size(); ++i) {
        Table& t = tables_[i];
        if (t.step % t.eviction_interval != 0) {
            for (const Table::Seen& seen : t.seen) {
                SR_CHECK(seen.evicted.empty(),
                         "table '{}': rows evicted at step {}, not an eviction step", t.name,
                         t.step);
            }
            continue;
        }
        due.push_back(i);
        int64_t occupancy = 0, slots = 0, evictions = 0, admissions = 0, ids = 0, hits = 0;
        std::vector<int64_t> owned_evicted;
        for (size_t b = 0; b < t.modules.size(); ++b) {
            const auto& m = t.modules[b];
            if (m == nullptr)
                continue;
            occupancy += m->occupancy();
            slots += m->usable_slots();
            evictions += m->evictions_total();
            admissions += m->admissions_total();
            Table::Seen& seen = t.seen[b];
            ids += seen.ids;
            hits += seen.hits;
            owned_evicted.insert(owned_evicted.end(), seen.evicted.begin(), seen.evicted.end());
            seen = Table::Seen{};
        }
        mine.insert(mine.end(),
                    {occupancy, slots, evictions - t.evictions_seen, admissions - t.admissions_seen,
                     ids, hits, static_cast<int64_t>(owned_evicted.size())});
        mine.insert(mine.end(), owned_evicted.begin(), owned_evicted.end());
        t.evictions_seen = evictions;
        t.admissions_seen = admissions;
    }
    if (due.empty())
        return;
    std::vector<int64_t> all = mine;
    std::vector<int64_t> sizes{static_cast<int64_t>(mine.size())};
    if (pg_ != nullptr && pg_->size() > 1) {
        const auto W = static_cast<size_t>(pg_->size());
        RecordBuffers& b = record_buffers_;
        Tensor n = grow_prefix(b.sizes, static_cast<int64_t>(W), DType::kI64);
        pg_->all_gather_v(i64_tensor(sizes, &b.size), n, std::vector<int64_t>(W, 1)).wait();
        sizes.assign(n.data<int64_t>(), n.data<int64_t>() + W);
        int64_t total = 0;
        for (int64_t c : sizes)
            total += c;
        Tensor g = grow_prefix(b.all, total, DType::kI64);
        pg_->all_gather_v(i64_tensor(mine, &b.mine), g, sizes).wait();
        all.assign(g.data<int64_t>(), g.data<int64_t>() + total);
    }
    // Each rank's part holds the due tables in order: seven counts, then the evicted rows.
    std::vector<size_t> at(sizes.size(), 0);
    for (size_t r = 1; r < sizes.size(); ++r)
        at[r] = at[r - 1] + static_cast<size_t>(sizes[r - 1]);
    for (size_t i : due) {
        Table& t = tables_[i];
        ManagedCollisionRecord rec{t.name, t.step, 0, 0, 0, 0, 0.0};
        int64_t ids = 0, hits = 0;
        std::vector<int64_t> rows;
        for (size_t r = 0; r < sizes.size(); ++r) {
            const int64_t* p = all.data() + at[r];
            rec.occupancy += p[0];
            rec.slots += p[1];
            rec.evictions += p[2];
            rec.admissions += p[3];
            ids += p[4];
            hits += p[5];
            rows.insert(rows.end(), p + 7, p + 7 + p[6]);
            at[r] += static_cast<size_t>(7 + p[6]);
        }
        rec.hit_fraction = ids > 0 ? static_cast<double>(hits) / static_cast<double>(ids) : 0.0;
        records_.push_back(rec);
        std::sort(rows.begin(), rows.end());
        if (!rows.empty())
            evicted->tables.emplace_back(i, std::move(rows));
    }
}

// The same values as at the start (init_embedding_rows, the tables' own init) and a fused
// optimizer state of zero: a new id starts from a fresh row, as TorchRec's MC-EBC resets it.
void ManagedCollisionTables::reset_rows(const Table& t,
                                        const std::vector<int64_t>& rows,
                                        EmbeddingBagCollectionInterface& sparse,
                                        Stream& stream) {
    if (rows.empty())
        return;
    // On a GPU the steps before may still update these rows: the reset comes after them (the
    // caches reset on the host), and is done before the next step's kernels are enqueued.
    stream.synchronize();
    for (EmbeddingShardState& s : sparse.shard_states()) {
        if (s.table != t.index)
            continue;
        std::vector<int64_t> mine;  // rows of this shard, local to it
        for (int64_t row : rows) {
            if (row >= s.row_offset && row < s.row_offset + s.rows)
                mine.push_back(row - s.row_offset);
        }
        if (s.cached != nullptr) {  // key_value, fused_uvm_caching: in the cache or the store
            s.cached->reset_rows(mine);
            continue;
        }
        Tensor local = i64_tensor(mine, &reset_rows_);
        if (!s.weight.device().is_cpu()) {
            Tensor on_device =
                grow_prefix(reset_rows_device_, local.numel(), DType::kI64, s.weight.device());
            on_device.copy_from(local);
            local = on_device;
        }
        kernels::embedding_init(s.weight, seed_, t.index, s.row_offset, s.col_offset,
                                t.num_embeddings, stream, &local);
        for (Tensor& state : s.optimizer_state)
            kernels::fill_(state, 0.f, stream, &local);
        stream.synchronize();  // done before `local` goes and the next step's kernels
    }
}

// Layout: a header of kStateHeader values [step, slots, window, pending, evictions_total,
// admissions_total, window_total], then slot_ids, slot_counts, slot_lasts, window_ids,
// window_counts, window_lasts, pending_evictions.
constexpr int64_t kStateHeader = 7;

Tensor ManagedCollisionTables::state_tensor(size_t i, int64_t bucket) const {
    const ManagedCollisionState s = module(i, bucket).state();
    std::vector<int64_t> out{s.step,
                             static_cast<int64_t>(s.slot_ids.size()),
                             static_cast<int64_t>(s.window_ids.size()),
                             static_cast<int64_t>(s.pending_evictions.size()),
                             s.evictions_total,
                             s.admissions_total,
                             s.window_total};
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

Tensor ManagedCollisionTables::id_to_row(const Tensor& state,
                                         int64_t first_row,
                                         const std::string& where) {
    const int64_t* p = state.data<int64_t>();
    const int64_t n = state.numel();
    SR_CHECK(n >= kStateHeader && p[1] >= 0 && kStateHeader + p[1] <= n,
             "{}: not a managed-collision state ({} values, {} slots in its header)", where, n,
             n >= 2 ? p[1] : -1);
    const int64_t slots = p[1];
    Tensor out = Tensor::empty({slots, 2}, DType::kI64);
    int64_t* o = out.data<int64_t>();
    for (int64_t s = 0; s < slots; ++s) {
        o[2 * s] = p[kStateHeader + s];  // slot_ids come right after the header
        o[2 * s + 1] = first_row + s;
    }
    return out;
}

void ManagedCollisionTables::load_state_tensor(size_t i,
                                               int64_t bucket,
                                               const Tensor& t,
                                               const std::string& where) {
    const int64_t* p = t.data<int64_t>();
    const int64_t n = t.numel();
    SR_CHECK(n >= kStateHeader,
             "{}: the managed-collision state of table '{}' has {} values, not the {} of "
             "its header",
             where, tables_[i].name, n, kStateHeader);
    ManagedCollisionState s;
    s.step = p[0];
    const int64_t slots = p[1], window = p[2], pending = p[3];
    s.evictions_total = p[4];
    s.admissions_total = p[5];
    s.window_total = p[6];
    SR_CHECK(slots >= 0 && window >= 0 && pending >= 0 &&
                 n == kStateHeader + 3 * slots + 3 * window + pending,
             "{}: the managed-collision state of table '{}' has {} values, its header says {} "
             "slots, {} window ids and {} pending rows",
             where, tables_[i].name, n, slots, window, pending);
    int64_t k = kStateHeader;
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
    SR_CHECK(owns(i, bucket), "table '{}': rank {} does not keep managed-collision bucket {}",
             table.name, rank_, bucket);
    const bool first = std::none_of(table.modules.begin(), table.modules.begin() + bucket,
                                    [](const auto& m) { return m != nullptr; });
    SR_CHECK(first || s.step == table.step,
             "{}: the managed-collision state of table '{}' bucket {} is at step {}, the "
             "table's other buckets at {}",
             where, table.name, bucket, s.step, table.step);
    if (first)
        table.evictions_seen = table.admissions_seen = 0;
    table.modules[static_cast<size_t>(bucket)]->load_state(s);
    table.step = s.step;
    table.evictions_seen += s.evictions_total;
    table.admissions_seen += s.admissions_total;
}

// A rank that keeps no bucket of a table learns its step from those that do (the largest: the
// others hold 0).
void ManagedCollisionTables::loaded() {
    if (pg_ == nullptr || pg_->size() == 1 || tables_.empty())
        return;
    std::vector<int64_t> steps;
    for (const Table& t : tables_)
        steps.push_back(t.step);
    Tensor all = i64_tensor(steps);
    pg_->all_reduce(all, comm::ReduceOp::kMax).wait();
    for (size_t i = 0; i < tables_.size(); ++i)
        tables_[i].step = all.data<int64_t>()[i];
}

}  // namespace shardrec::train
