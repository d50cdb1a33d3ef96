// Sharded EmbeddingCollection: building the shards from the plan, then per path the input dist,
// the sequence lookups and the sequence embeddings all-to-all, or for data_parallel the local
// lookups and the gathered backward (see the header).
#include "engine/distributed/sharded_embedding_collection.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "engine/distributed/bucketize.h"
#include "engine/distributed/kjt_all_gather.h"
#include "engine/distributed/kjt_all_to_all.h"
#include "engine/distributed/sequence_embeddings.h"
#include "kernels/sequence_embedding.h"

namespace shardrec {

namespace {

// One key of a width path: output key `key` looked up in the column shard [col_offset, +cols)
// (all rows) of `table`, shard `shard` of its plan, which lives on rank `dest`.
struct Entry {
    int64_t key = 0;
    int64_t table = 0;
    int64_t shard = 0;
    int64_t col_offset = 0, cols = 0;
    int dest = 0;
};

}  // namespace

struct ShardedEmbeddingCollection::Shard {
    int64_t table = 0;
    int64_t row_offset = 0, rows = 0, col_offset = 0, cols = 0;
    int64_t first_key = 0, num_keys = 0;  // contiguous keys of the received KJT
    Tensor weights, state1, state2;       // [rows, cols], optimizer state
    Tensor table_offsets;                 // [2] i64: {0, rows}
    Tensor feature_table;                 // [num_keys] i32 zeros
    kernels::EmbeddingBackwardWorkspace workspace;
    Tensor ids, offsets;   // the latest forward's ids of this shard
    int64_t first_id = 0;  // their first row in the path's local rows
    int64_t step = 1;      // the 1-based step of the next fused update
};

struct ShardedEmbeddingCollection::Path {
    enum class Kind { kWidth, kRowWise, kDataParallel };
    Kind kind = Kind::kWidth;
    int64_t width = 0;
    std::vector<Entry> entries;   // width path: in send order (by destination rank)
    std::vector<int64_t> keys;    // row-wise, data-parallel path: output keys, in names order
    std::vector<int64_t> blocks;  // row-wise path: block size of each key
    std::vector<Shard> local;     // this rank's shards, in received key order
    std::unique_ptr<KJTAllToAll> a2a;
    std::unique_ptr<SequenceEmbeddingsAllToAll> seq_a2a;
    std::optional<KJTAllToAllSplitsAwaitable> pending;
    // My keys for the global batch of the latest forward (data-parallel: for my batch).
    KeyedJaggedTensor received;
    KJTAllToAllSplits splits;
    std::optional<Tensor> unbucketize_permute;
    Tensor local_rows;           // [N_local, width] the lookups' rows
    Tensor grad_in;              // [N_in, width] the gradient rows of my batch
    KJTAllGatherBuffers gather;  // data-parallel backward: every rank's ids and gradient rows

    // The output keys of the rows this rank sent, in send order, with their columns.
    std::vector<std::tuple<int64_t, int64_t, int64_t>> sent_keys() const {
        std::vector<std::tuple<int64_t, int64_t, int64_t>> out;
        for (const Entry& e : entries)
            out.emplace_back(e.key, e.col_offset, e.cols);
        for (int64_t k : keys)
            out.emplace_back(k, 0, width);
        return out;
    }
};

namespace {

// Shard s's bags (keys [first_key, +num_keys)) of fixed-stride B jagged data: ids view, rebased
// offsets.
void slice_bags(const int64_t* off,
                int64_t B,
                const Tensor& values,
                ShardedEmbeddingCollection::Shard& s) {
    const int64_t o0 = off[s.first_key * B], o1 = off[(s.first_key + s.num_keys) * B];
    s.offsets = Tensor::empty({s.num_keys * B + 1}, DType::kI64);
    int64_t* o = s.offsets.data<int64_t>();
    for (int64_t i = 0; i <= s.num_keys * B; ++i)
        o[i] = off[s.first_key * B + i] - o0;
    s.ids = values.slice(o0, o1);
    s.first_id = o0;
}

void slice_keys(const KeyedJaggedTensor& kjt, ShardedEmbeddingCollection::Shard& s) {
    slice_bags(kjt.offsets().data<int64_t>(), kjt.stride(), kjt.values(), s);
}

// The fused update of shard s's rows for the gradient rows g [s.ids.numel(), cols] of its ids.
void update_shard(ShardedEmbeddingCollection::Shard& s,
                  const Tensor& g,
                  kernels::FusedOptimizerParams optim,
                  Stream& stream) {
    optim.step = s.step++;
    kernels::sequence_embedding_backward_fused(
        g, s.table_offsets, s.feature_table, s.ids, s.offsets, optim, s.weights,
        s.state1.defined() ? &s.state1 : nullptr, s.state2.defined() ? &s.state2 : nullptr,
        s.workspace, stream);
}

void init_shard(ShardedEmbeddingCollection::Shard& s,
                const EmbeddingConfig& table,
                uint64_t seed,
                const kernels::FusedOptimizerParams& optim) {
    s.weights = Tensor::empty({s.rows, s.cols}, table.data_type);
    init_embedding_rows(s.weights, seed, s.table, s.row_offset, s.col_offset, table.num_embeddings);
    kernels::make_optimizer_states(optim, s.rows, s.cols, s.state1, s.state2);
    s.table_offsets = Tensor::from_vector<int64_t>({0, s.rows});
    s.feature_table = Tensor::zeros({s.num_keys}, DType::kI32);
    s.step = optim.step;
}

// Appends key `key_index` to the last shard when `same` says it is that shard, else a new one.
template <typename Same>
void add_key(std::vector<ShardedEmbeddingCollection::Shard>& out,
             int64_t key_index,
             const ShardedEmbeddingCollection::Shard& proto,
             Same same) {
    if (!out.empty() && same(out.back())) {
        ++out.back().num_keys;
        return;
    }
    out.emplace_back();
    auto& s = out.back();
    s.table = proto.table;
    s.row_offset = proto.row_offset;
    s.rows = proto.rows;
    s.col_offset = proto.col_offset;
    s.cols = proto.cols;
    s.first_key = key_index;
    s.num_keys = 1;
}

// dst rows [dst_row, +n) columns [dst_col, +cols) = src rows [src_row, +n) columns
// [src_col, +cols), for 2-D f32 tensors.
void copy_block(Tensor& dst,
                int64_t dst_row,
                int64_t dst_col,
                const Tensor& src,
                int64_t src_row,
                int64_t src_col,
                int64_t n,
                int64_t cols) {
    const int64_t dn = dst.size(1), sn = src.size(1);
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    for (int64_t i = 0; i < n; ++i) {
        std::memcpy(d + (dst_row + i) * dn + dst_col, s + (src_row + i) * sn + src_col,
                    static_cast<size_t>(cols) * sizeof(float));
    }
}

}  // namespace

ShardedEmbeddingCollection::ShardedEmbeddingCollection(
    std::vector<EmbeddingConfig> tables,
    const ShardingPlan& plan,
    std::shared_ptr<comm::ProcessGroup> pg,
    uint64_t seed,
    const kernels::FusedOptimizerParams& optimizer)
    : tables_(std::move(tables)), pg_(std::move(pg)), optimizer_(optimizer) {
    SR_CHECK(plan.env.world_size == pg_->size(),
             "the sharding plan is for {} ranks, but {} ranks are running", plan.env.world_size,
             pg_->size());
    SR_CHECK(optimizer_.step >= 1, "fused optimizer step must be >= 1");
    key_table_ = check_sequence_tables("ShardedEmbeddingCollection", tables_);
    dim_ = tables_[0].embedding_dim;
    for (const EmbeddingConfig& c : tables_)
        names_.insert(names_.end(), c.feature_names.begin(), c.feature_names.end());
    build(plan, seed);
}

ShardedEmbeddingCollection::~ShardedEmbeddingCollection() = default;

void ShardedEmbeddingCollection::build(const ShardingPlan& plan, uint64_t seed) {
    const int me = pg_->rank(), world = pg_->size();
    std::map<int64_t, Path> by_width;
    Path rw, dp;
    rw.kind = Path::Kind::kRowWise;
    rw.width = dim_;
    dp.kind = Path::Kind::kDataParallel;
    dp.width = dim_;
    for (size_t k = 0; k < names_.size(); ++k) {
        const int64_t t = key_table_[k];
        const EmbeddingConfig& table = tables_[static_cast<size_t>(t)];
        const ParameterSharding& ps = plan.at(table.name);
        switch (ps.sharding_type) {
            case ShardingType::kRowWise:
                rw.keys.push_back(static_cast<int64_t>(k));
                rw.blocks.push_back(row_block_size(table.num_embeddings, world));
                break;
            case ShardingType::kDataParallel:
                dp.keys.push_back(static_cast<int64_t>(k));
                break;
            case ShardingType::kTableWise:
            case ShardingType::kColumnWise:
                for (size_t s = 0; s < ps.sharding_spec.size(); ++s) {
                    const ShardMetadata& m = ps.sharding_spec[s];
                    SR_CHECK(m.shard_offsets[0] == 0 && m.shard_sizes[0] == table.num_embeddings,
                             "ShardedEmbeddingCollection: table '{}' shard {} holds rows [{}, +{}) "
                             "of {}; {} shards hold every row",
                             table.name, s, m.shard_offsets[0], m.shard_sizes[0],
                             table.num_embeddings, sharding_type_name(ps.sharding_type));
                    by_width[m.shard_sizes[1]].entries.push_back(
                        {static_cast<int64_t>(k), t, static_cast<int64_t>(s), m.shard_offsets[1],
                         m.shard_sizes[1], m.rank});
                }
                break;
            default:
                SR_CHECK(
                    false,
                    "ShardedEmbeddingCollection: table '{}' is planned {}; sequence embeddings "
                    "support data_parallel, table_wise, column_wise and row_wise",
                    table.name, sharding_type_name(ps.sharding_type));
        }
    }
    for (auto& [width, p] : by_width) {
        p.width = width;
        // Keys go out ordered by destination; on a rank, the features of one shard are adjacent.
        std::stable_sort(p.entries.begin(), p.entries.end(), [](const Entry& a, const Entry& b) {
            return std::tie(a.dest, a.table, a.shard, a.key) <
                   std::tie(b.dest, b.table, b.shard, b.key);
        });
        std::vector<int64_t> splits(static_cast<size_t>(world), 0);
        int64_t mine = 0;
        for (const Entry& e : p.entries) {
            ++splits[static_cast<size_t>(e.dest)];
            if (e.dest != me)
                continue;
            Shard proto;
            proto.table = e.table;
            proto.rows = tables_[static_cast<size_t>(e.table)].num_embeddings;
            proto.col_offset = e.col_offset;
            proto.cols = e.cols;
            add_key(p.local, mine++, proto, [&](const Shard& s) {
                return s.table == e.table && s.col_offset == e.col_offset;
            });
        }
        p.a2a = std::make_unique<KJTAllToAll>(pg_, splits);
        p.seq_a2a = std::make_unique<SequenceEmbeddingsAllToAll>(pg_, splits);
        paths_.push_back(std::make_unique<Path>(std::move(p)));
    }
    if (!rw.keys.empty()) {
        // Every rank holds block `me` of every row-wise table (empty past the last row).
        for (size_t i = 0; i < rw.keys.size(); ++i) {
            const int64_t k = rw.keys[i];
            const EmbeddingConfig& table = tables_[static_cast<size_t>(key_table_[k])];
            Shard proto;
            proto.table = key_table_[k];
            proto.row_offset = std::min<int64_t>(rw.blocks[i] * me, table.num_embeddings);
            proto.rows = std::min<int64_t>(rw.blocks[i], table.num_embeddings - proto.row_offset);
            proto.cols = dim_;
            add_key(rw.local, static_cast<int64_t>(i), proto,
                    [&](const Shard& s) { return s.table == proto.table; });
        }
        const std::vector<int64_t> splits(static_cast<size_t>(world),
                                          static_cast<int64_t>(rw.keys.size()));
        rw.a2a = std::make_unique<KJTAllToAll>(pg_, splits);
        rw.seq_a2a = std::make_unique<SequenceEmbeddingsAllToAll>(pg_, splits);
        paths_.push_back(std::make_unique<Path>(std::move(rw)));
    }
    if (!dp.keys.empty()) {
        // Every rank holds the whole table; its features stay on the rank (no all-to-all).
        for (size_t i = 0; i < dp.keys.size(); ++i) {
            Shard proto;
            proto.table = key_table_[static_cast<size_t>(dp.keys[i])];
            proto.rows = tables_[static_cast<size_t>(proto.table)].num_embeddings;
            proto.cols = dim_;
            add_key(dp.local, static_cast<int64_t>(i), proto,
                    [&](const Shard& s) { return s.table == proto.table; });
        }
        paths_.push_back(std::make_unique<Path>(std::move(dp)));
    }
    for (auto& p : paths_) {
        for (Shard& s : p->local)
            init_shard(s, tables_[static_cast<size_t>(s.table)], seed, optimizer_);
    }
}

// ---- forward ----

void ShardedEmbeddingCollection::input_dist(const KeyedJaggedTensor& kjt) {
    SR_CHECK(!kjt.variable_stride_per_key(),
             "ShardedEmbeddingCollection: a variable batch per key is not supported");
    const int64_t B = kjt.stride();
    const int64_t* len = kjt.lengths().data<int64_t>();
    const int64_t* off = kjt.offsets().data<int64_t>();
    const int64_t* ids = kjt.values().data<int64_t>();
    key_row_.assign(names_.size(), 0);
    key_count_.assign(names_.size(), 0);
    std::vector<int64_t> index(names_.size());
    int64_t rows = 0;
    for (size_t k = 0; k < names_.size(); ++k) {
        index[k] = kjt.key_index(names_[k]);
        const EmbeddingConfig& table = tables_[static_cast<size_t>(key_table_[k])];
        const int64_t o0 = off[index[k] * B], o1 = off[(index[k] + 1) * B];
        for (int64_t i = o0; i < o1; ++i) {
            SR_CHECK(ids[i] >= 0 && ids[i] < table.num_embeddings,
                     "ShardedEmbeddingCollection: feature '{}' id {} is outside table '{}' of {} "
                     "rows",
                     names_[k], ids[i], table.name, table.num_embeddings);
        }
        key_row_[k] = rows;
        key_count_[k] = o1 - o0;
        rows += o1 - o0;
    }
    // Phase 1 of every path first, so the count exchanges overlap.
    for (auto& p : paths_) {
        if (p->kind == Path::Kind::kDataParallel) {  // each rank looks up its own batch
            std::vector<int64_t> dp_index;
            for (int64_t k : p->keys)
                dp_index.push_back(index[static_cast<size_t>(k)]);
            p->received = kjt.permute(dp_index);
            continue;
        }
        if (p->kind == Path::Kind::kRowWise) {
            std::vector<int64_t> rw_index;
            for (int64_t k : p->keys)
                rw_index.push_back(index[static_cast<size_t>(k)]);
            BucketizedKJT bucketized = bucketize_kjt_before_all2all(
                kjt.permute(rw_index), pg_->size(), p->blocks, /*output_permute=*/true);
            p->unbucketize_permute = std::move(bucketized.unbucketize_permute);
            p->pending.emplace(p->a2a->start(std::move(bucketized.features)));
            continue;
        }
        KJTAllToAllInput in;
        in.stride = B;
        std::vector<int64_t> lengths, values;
        for (const Entry& e : p->entries) {
            in.keys.push_back(names_[static_cast<size_t>(e.key)] + "@" + std::to_string(e.shard));
            const int64_t ki = index[static_cast<size_t>(e.key)];
            lengths.insert(lengths.end(), len + ki * B, len + (ki + 1) * B);
            values.insert(values.end(), ids + off[ki * B], ids + off[(ki + 1) * B]);
        }
        in.lengths = Tensor::from_vector(lengths);
        in.values = Tensor::from_vector(values);
        p->pending.emplace(p->a2a->start(std::move(in)));
    }
    std::vector<std::pair<Path*, KJTAllToAllTensorsAwaitable>> tensors;
    for (auto& p : paths_) {
        if (p->pending)
            tensors.emplace_back(p.get(), p->pending->tensors());
    }
    for (auto& [p, t] : tensors) {
        p->received = t.wait();
        p->splits = t.splits();
        p->pending.reset();
    }
}

void ShardedEmbeddingCollection::lookup_and_output_dist(Path& p, Stream& stream) {
    const int64_t n_local = p.received.values().numel();
    if (!p.local_rows.defined() || p.local_rows.size(0) != n_local)
        p.local_rows = Tensor::empty({n_local, p.width}, DType::kF32);
    for (Shard& s : p.local) {
        slice_keys(p.received, s);
        Tensor rows = p.local_rows.slice(s.first_id, s.first_id + s.ids.numel());
        kernels::sequence_embedding_forward(s.weights, s.table_offsets, s.feature_table, s.ids,
                                            s.offsets, rows, stream);
    }
    const Tensor back =
        p.kind == Path::Kind::kDataParallel
            ? p.local_rows
            : p.seq_a2a->forward(p.local_rows, p.received.lengths(), p.splits,
                                 p.unbucketize_permute ? &*p.unbucketize_permute : nullptr);
    int64_t row = 0;
    for (const auto& [k, col, cols] : p.sent_keys()) {
        const size_t ks = static_cast<size_t>(k);
        copy_block(out_, key_row_[ks], col, back, row, 0, key_count_[ks], cols);
        row += key_count_[ks];
    }
}

std::vector<std::pair<std::string, JaggedTensor>> ShardedEmbeddingCollection::forward(
    const KeyedJaggedTensor& features, Stream& stream) {
    input_dist(features);
    const int64_t n = key_count_.empty() ? 0 : key_row_.back() + key_count_.back();
    out_ = Tensor::empty({n, dim_}, DType::kF32);
    for (auto& p : paths_)
        lookup_and_output_dist(*p, stream);
    std::vector<std::pair<std::string, JaggedTensor>> result;
    const int64_t B = features.stride();
    for (size_t k = 0; k < names_.size(); ++k) {
        const int64_t ki = features.key_index(names_[k]);
        result.emplace_back(names_[k], JaggedTensor::from_lengths(
                                           out_.slice(key_row_[k], key_row_[k] + key_count_[k]),
                                           features.lengths().slice(ki * B, (ki + 1) * B)));
    }
    return result;
}

// ---- backward ----

void ShardedEmbeddingCollection::backward(const std::vector<std::pair<std::string, Tensor>>& grads,
                                          Stream& stream) {
    SR_CHECK(out_.defined(), "ShardedEmbeddingCollection::backward before any forward");
    SR_CHECK(grads.size() == names_.size(),
             "ShardedEmbeddingCollection::backward: {} gradients for {} features", grads.size(),
             names_.size());
    std::vector<const Tensor*> by_key(names_.size(), nullptr);
    for (size_t k = 0; k < names_.size(); ++k) {
        const auto it = std::find_if(grads.begin(), grads.end(),
                                     [&](const auto& kv) { return kv.first == names_[k]; });
        SR_CHECK(it != grads.end(),
                 "ShardedEmbeddingCollection::backward: no gradient for feature '{}'", names_[k]);
        SR_CHECK(
            it->second.dtype() == DType::kF32 && it->second.shape() == Shape({key_count_[k], dim_}),
            "ShardedEmbeddingCollection::backward: feature '{}' needs f32[{}, {}], got {}",
            names_[k], key_count_[k], dim_, it->second.str());
        by_key[k] = &it->second;
    }
    // Every path's gradient all-to-all in flight, then the fused updates path by path.
    std::vector<TensorAwaitable> pending;
    for (auto& p : paths_) {
        int64_t n_in = 0;
        for (const auto& sent : p->sent_keys())
            n_in += key_count_[static_cast<size_t>(std::get<0>(sent))];
        if (!p->grad_in.defined() || p->grad_in.size(0) != n_in)
            p->grad_in = Tensor::empty({n_in, p->width}, DType::kF32);
        int64_t row = 0;
        for (const auto& [k, col, cols] : p->sent_keys()) {
            const size_t ks = static_cast<size_t>(k);
            copy_block(p->grad_in, row, 0, *by_key[ks], 0, col, key_count_[ks], cols);
            row += key_count_[ks];
        }
        pending.push_back(p->kind == Path::Kind::kDataParallel
                              ? TensorAwaitable()
                              : p->seq_a2a->start_backward(p->grad_in));
    }
    for (size_t i = 0; i < paths_.size(); ++i) {
        Path& p = *paths_[i];
        if (p.kind == Path::Kind::kDataParallel) {
            backward_data_parallel(p, stream);
            continue;
        }
        const Tensor grad_local = pending[i].wait();
        for (Shard& s : p.local)
            update_shard(s, grad_local.slice(s.first_id, s.first_id + s.ids.numel()), optimizer_,
                         stream);
    }
}

void ShardedEmbeddingCollection::backward_data_parallel(Path& p, Stream& stream) {
    // Every replica applies the update of the global batch: every rank's ids with their gradient
    // rows, in the order one process sees them (feature, then the samples of rank 0, rank 1, ...),
    // divided by the world size when gradient_division() is on, as the sequence all-to-all's
    // backward is.
    const GatheredKJT all = all_gather_kjt(*pg_, p.received, &p.grad_in, p.gather);
    Tensor grad = all.payload;
    if (gradient_division())
        divide_by_world(grad, pg_->size());
    for (Shard& s : p.local) {
        slice_bags(all.offsets.data<int64_t>(), all.stride, all.values, s);
        update_shard(s, grad.slice(s.first_id, s.first_id + s.ids.numel()), optimizer_, stream);
    }
}

// ---- inspection ----

Tensor ShardedEmbeddingCollection::unsharded_weight(int64_t table) const {
    const EmbeddingConfig& cfg = tables_.at(static_cast<size_t>(table));
    Tensor full = Tensor::zeros({cfg.num_embeddings, cfg.embedding_dim}, DType::kF32);
    float* f = full.data<float>();
    for (const auto& p : paths_) {
        // Replicas are identical: rank 0's copy joins the sum.
        if (p->kind == Path::Kind::kDataParallel && pg_->rank() != 0)
            continue;
        for (const Shard& s : p->local) {
            if (s.table != table)
                continue;
            SR_CHECK(s.weights.dtype() == DType::kF32,
                     "unsharded_weight: table '{}' is stored as {}", cfg.name,
                     dtype_name(s.weights.dtype()));
            const float* src = s.weights.data<float>();
            for (int64_t r = 0; r < s.rows; ++r) {
                std::memcpy(f + (s.row_offset + r) * cfg.embedding_dim + s.col_offset,
                            src + r * s.cols, static_cast<size_t>(s.cols) * sizeof(float));
            }
        }
    }
    pg_->all_reduce(full, comm::ReduceOp::kSum).wait();  // every element has one contributor
    return full;
}

std::vector<EmbeddingShardState> ShardedEmbeddingCollection::shard_states() {
    std::vector<EmbeddingShardState> out;
    for (auto& p : paths_) {
        for (Shard& s : p->local) {
            EmbeddingShardState st;
            st.table = s.table;
            st.row_offset = s.row_offset;
            st.rows = s.rows;
            st.col_offset = s.col_offset;
            st.cols = s.cols;
            st.replicated = p->kind == Path::Kind::kDataParallel;
            st.weight = s.weights;
            for (const Tensor* state : {&s.state1, &s.state2}) {
                if (state->defined())
                    st.optimizer_state.push_back(*state);
            }
            st.optimizer_step = &s.step;
            out.push_back(std::move(st));
        }
    }
    return out;
}

int64_t ShardedEmbeddingCollection::parameter_bytes() const {
    int64_t n = 0;
    for (const auto& p : paths_) {
        for (const Shard& s : p->local)
            n += static_cast<int64_t>(s.weights.nbytes());
    }
    return n;
}

int64_t ShardedEmbeddingCollection::optimizer_state_bytes() const {
    int64_t n = 0;
    for (const auto& p : paths_) {
        for (const Shard& s : p->local) {
            for (const Tensor* state : {&s.state1, &s.state2}) {
                if (state->defined())
                    n += static_cast<int64_t>(state->nbytes());
            }
        }
    }
    return n;
}

}  // namespace shardrec
