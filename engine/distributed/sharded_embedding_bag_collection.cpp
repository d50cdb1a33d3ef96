// Sharded EmbeddingBagCollection: the three dist paths, forward and backward (building the shards:
// sharded_embedding_bag_collection_build.cpp; the key_value caches' fills: _key_value.cpp; shard
// inspection for tests and checkpoints: _state.cpp).
#include "engine/distributed/sharded_embedding_bag_collection.h"

#include <algorithm>
#include <chrono>

#include "comm/staged_process_group.h"
#include "engine/core/profile.h"
#include "engine/distributed/bucketize.h"
#include "engine/distributed/comm_ops.h"
#include "engine/distributed/sharded_embedding_bag_collection_impl.h"
#include "engine/modules/init.h"
#include "engine/modules/interaction.h"
#include "kernels/elementwise.h"

namespace shardrec {

namespace {

// The shard's bags where its kernels run: the host views themselves, or copies on the device of
// its rows (in the stream's order).
void place_bags(ShardedEmbeddingBagCollection::ShardLookup& s, Stream& stream) {
    if (s.cached) {  // the batch's rows into the cache, its ids into slots
        if (!s.prefetched)
            s.cached->prefetch(s.ids, s.slot_ids, stream);
        s.prefetched = false;
        s.weights = s.cached->weights;
        s.state1 = s.cached->state1;
        s.state2 = s.cached->state2;
        s.table_offsets = s.cached->table_offsets;
    }
    const Device device = s.weights.device();
    if (device.is_cpu()) {
        s.k_ids = s.cached ? s.slot_ids : s.ids;
        s.k_offsets = s.offsets;
        s.k_psw = s.psw;
        return;
    }
    if (!s.stager)
        s.stager.emplace(device);
    s.stager->begin(HostToDeviceStager::padded_bytes(s.ids) +  // slot_ids: as many
                    HostToDeviceStager::padded_bytes(s.offsets) +
                    (s.psw.defined() ? HostToDeviceStager::padded_bytes(s.psw) : 0));
    s.k_ids = s.stager->copy(s.k_ids_buf, s.cached ? s.slot_ids : s.ids);
    s.k_offsets = s.stager->copy(s.k_offsets_buf, s.offsets);
    s.k_psw = s.psw.defined() ? s.stager->copy(s.k_psw_buf, s.psw) : Tensor();
    s.stager->end(stream);
}

// The bags of keys [first, first + n) of fixed-stride B jagged data (offsets `off`, values,
// weights or null): ids view, rebased offsets (in offsets_buf), weights.
void slice_bags(const int64_t* off,
                int64_t B,
                const Tensor& values,
                const Tensor* weights,
                int64_t first,
                int64_t n,
                ShardedEmbeddingBagCollection::ShardLookup& s) {
    const int64_t o0 = off[first * B], o1 = off[(first + n) * B];
    s.offsets = grow_prefix(s.offsets_buf, n * B + 1, DType::kI64);
    int64_t* o = s.offsets.data<int64_t>();
    for (int64_t i = 0; i <= n * B; ++i)
        o[i] = off[first * B + i] - o0;
    s.ids = values.slice(o0, o1);
    s.psw = weights != nullptr ? weights->slice(o0, o1) : Tensor();
}

void slice_keys(const KeyedJaggedTensor& kjt,
                int64_t first,
                int64_t n,
                ShardedEmbeddingBagCollection::ShardLookup& s) {
    slice_bags(kjt.offsets().data<int64_t>(), kjt.stride(), kjt.values(),
               kjt.has_weights() ? &kjt.weights() : nullptr, first, n, s);
}

// Position-weighted shards: s.psw holds the ids' positions; they become the position weights.
void apply_position_weights(ShardedEmbeddingBagCollection::ShardLookup& s,
                            const PositionWeightedModule& pw) {
    s.positions = s.psw;
    Tensor weights = grow_prefix(s.psw_buf, s.positions.numel(), DType::kF32);
    const int64_t B = (s.offsets.numel() - 1) / s.num_keys;
    const int64_t* o = s.offsets.data<int64_t>();
    for (int64_t j = 0; j < s.num_keys; ++j) {
        const int64_t v0 = o[j * B], v1 = o[(j + 1) * B];
        pw.weights_at(s.position_weights[static_cast<size_t>(j)], s.positions.data<float>() + v0,
                      v1 - v0, weights.data<float>() + v0);
    }
    s.psw = weights;
}

void lookup_forward(ShardedEmbeddingBagCollection::ShardLookup& s,
                    const KeyedJaggedTensor& kjt,
                    const PositionWeightedModule* pw,
                    Stream& stream) {
    slice_keys(kjt, s.first_key, s.num_keys, s);
    if (!s.position_weights.empty())
        apply_position_weights(s, *pw);
    place_bags(s, stream);
    if (s.quant_rows.defined()) {  // inference: the rows as quantized, pooled whole
        const int64_t dim = s.quant_dims.data<int32_t>()[1];
        Tensor& pooled = dim == s.cols ? s.out : s.quant_pooled;
        init::reuse_or_allocate(pooled, {kjt.stride(), s.num_keys * dim}, Device::cpu());
        const auto t0 = std::chrono::steady_clock::now();
        kernels::quant_embedding_bag_forward(
            s.quant_rows, s.quant_offsets, s.quant_types, s.quant_dims, s.feature_table, s.k_ids,
            s.k_offsets, s.k_psw.defined() ? &s.k_psw : nullptr, s.mode, pooled, stream);
        if (dim != s.cols) {  // a column shard keeps its columns of each key
            init::reuse_or_allocate(s.out, {kjt.stride(), s.num_keys * s.cols}, Device::cpu());
            for (int64_t b = 0; b < kjt.stride(); ++b) {
                for (int64_t j = 0; j < s.num_keys; ++j) {
                    std::copy_n(pooled.data<float>() + (b * s.num_keys + j) * dim + s.col_offset,
                                s.cols, s.out.data<float>() + (b * s.num_keys + j) * s.cols);
                }
            }
        }
        s.quant_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        s.quant_bytes += s.k_ids.numel() * (s.quant_rows.numel() / std::max<int64_t>(s.rows, 1));
        return;
    }
    init::reuse_or_allocate(s.out, {kjt.stride(), s.num_keys * s.cols}, s.weights.device());
    kernels::embedding_bag_forward(s.weights, s.table_offsets, s.feature_table, s.k_ids,
                                   s.k_offsets, s.k_psw.defined() ? &s.k_psw : nullptr, s.mode,
                                   s.out, stream);
}

// 2D parallelism (sharding.replica_groups): the fused update of the shard's rows with the
// gradient of the whole global batch, the same on every replica of the shard. A fused optimizer
// is not linear in its gradient, so the replicas cannot each update with their own group's part:
// they exchange each touched row's gradient first and every replica applies one update per row
// of the union of their rows, as one sharding over the world would.
//   1. my rows' gradients: the kernel's own per-row sum (MEAN, weights, a table serving several
//      features) into a compact table of my U touched rows (sorted);
//   2. all-gather over the replicas of U, the row ids and their [U, D] gradients. An all-gather,
//      not an all-reduce of the union: every rank then adds the replicas' parts in replica order,
//      so the replicas stay bitwise identical whatever order the MPI library would sum in, and
//      with two replicas it sends less (my rows, not the union);
//   3. the sum, divided by the number of replicas R where the group's backward collective divided
//      by its G ranks (gradient_division): 1 / (G R) = 1 / W, the 1D gradient;
//   4. the fused kernel over one bag per union row: each row updated once with its summed
//      gradient (touched in the global batch <=> in the union, as in 1D).
// Cost per step and shard: each rank receives the other replicas' (8 + 4 D) U_r bytes, plus 8 R.
void replica_synced_update(ShardedEmbeddingBagCollection::ShardLookup& s,
                           const kernels::FusedOptimizerParams& optim,
                           comm::ProcessGroup& replicas,
                           Stream& stream) {
    const int64_t n = s.ids.numel(), D = s.cols;
    const int64_t* ids = s.ids.data<int64_t>();  // shard rows (k_ids: a cached shard's slots)
    std::vector<int64_t> rows(ids, ids + n);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    const auto U = static_cast<int64_t>(rows.size());
    Tensor local = Tensor::zeros({U, D}, DType::kF32);
    if (U > 0) {
        Tensor compact = Tensor::empty({n}, DType::kI64);
        int64_t* c = compact.data<int64_t>();
        for (int64_t i = 0; i < n; ++i)
            c[i] = std::lower_bound(rows.begin(), rows.end(), ids[i]) - rows.begin();
        // The rows are read only for d loss / d psw, which is not asked for here.
        const Tensor no_rows = Tensor::zeros({U, D}, DType::kF32);
        kernels::embedding_bag_backward(s.grad, no_rows, Tensor::from_vector<int64_t>({0, U}),
                                        s.feature_table, compact, s.k_offsets,
                                        s.k_psw.defined() ? &s.k_psw : nullptr, s.mode, &local,
                                        nullptr, s.workspace, stream);
    }
    const int R = replicas.size();
    Tensor counts = Tensor::empty({R}, DType::kI64);
    replicas.all_gather_v(Tensor::from_vector<int64_t>({U}), counts, std::vector<int64_t>(R, 1))
        .wait();
    std::vector<int64_t> id_splits(counts.data<int64_t>(), counts.data<int64_t>() + R),
        grad_splits(static_cast<size_t>(R));
    int64_t total = 0;
    for (int r = 0; r < R; ++r) {
        grad_splits[static_cast<size_t>(r)] = id_splits[static_cast<size_t>(r)] * D;
        total += id_splits[static_cast<size_t>(r)];
    }
    Tensor all_ids = Tensor::empty({total}, DType::kI64);
    Tensor all_grads = Tensor::empty({total, D}, DType::kF32);
    comm::Work w_ids =
        replicas.all_gather_v(Tensor::from_vector<int64_t>(rows), all_ids, id_splits);
    comm::Work w_grads = replicas.all_gather_v(local, all_grads, grad_splits);
    w_ids.wait();
    w_grads.wait();
    const int64_t* gathered = all_ids.data<int64_t>();
    std::vector<int64_t> un(gathered, gathered + total);
    std::sort(un.begin(), un.end());
    un.erase(std::unique(un.begin(), un.end()), un.end());
    const auto UA = static_cast<int64_t>(un.size());
    Tensor sum = Tensor::zeros({UA, D}, DType::kF32);
    float* out = sum.data<float>();
    const float* g = all_grads.data<float>();
    for (int64_t i = 0; i < total; ++i) {  // replica order: every rank adds the same way
        const int64_t u = std::lower_bound(un.begin(), un.end(), gathered[i]) - un.begin();
        for (int64_t d = 0; d < D; ++d)
            out[u * D + d] += g[i * D + d];
    }
    if (gradient_division())
        divide_by_world(sum, R, stream);
    std::vector<int64_t> bags(static_cast<size_t>(UA + 1));
    for (int64_t i = 0; i <= UA; ++i)
        bags[static_cast<size_t>(i)] = i;
    Tensor update_ids = Tensor::from_vector<int64_t>(un);
    if (s.cached) {  // the other replicas' rows join the batch's in the cache
        Tensor slots;
        s.cached->place_updated(update_ids, slots, stream);
        update_ids = slots;
        s.weights = s.cached->weights;
        s.state1 = s.cached->state1;
        s.state2 = s.cached->state2;
        s.table_offsets = s.cached->table_offsets;
    }
    kernels::embedding_bag_backward_fused(
        sum, s.table_offsets, Tensor::zeros({1}, DType::kI32), update_ids,
        Tensor::from_vector<int64_t>(bags), nullptr, PoolingMode::kSum, optim, s.weights,
        s.state1.defined() ? &s.state1 : nullptr, s.state2.defined() ? &s.state2 : nullptr,
        s.workspace, stream);
}

// The fused update of the shard's rows; first, for a position-weighted shard, d loss / d psw
// (before the rows change), times pw_grad_scale, into the position weights' gradients. With
// replicas (2D parallelism) the rows' gradients are summed over them first.
void lookup_backward(ShardedEmbeddingBagCollection::ShardLookup& s,
                     kernels::FusedOptimizerParams optim,
                     PositionWeightedModule* pw,
                     float pw_grad_scale,
                     comm::ProcessGroup* replicas,
                     Stream& stream) {
    if (!s.position_weights.empty()) {
        const Device device = s.weights.device();
        Tensor grad_psw = grow_prefix(s.grad_psw_buf, s.ids.numel(), DType::kF32, device);
        kernels::embedding_bag_backward(s.grad, s.weights, s.table_offsets, s.feature_table,
                                        s.k_ids, s.k_offsets, &s.k_psw, s.mode, nullptr, &grad_psw,
                                        s.workspace, stream);
        if (device.is_cuda()) {  // accumulated on the host
            stream.synchronize();
            Tensor host = grow_prefix(s.grad_psw_host_buf, s.ids.numel(), DType::kF32);
            host.copy_from(grad_psw);
            grad_psw = host;
        }
        const int64_t B = (s.offsets.numel() - 1) / s.num_keys;
        const int64_t* o = s.offsets.data<int64_t>();
        for (int64_t j = 0; j < s.num_keys; ++j) {
            const int64_t v0 = o[j * B], v1 = o[(j + 1) * B];
            pw->accumulate_grad(s.position_weights[static_cast<size_t>(j)],
                                s.positions.data<float>() + v0, grad_psw.data<float>() + v0,
                                v1 - v0, pw_grad_scale);
        }
    }
    optim.step = s.step++;
    if (replicas != nullptr) {
        replica_synced_update(s, optim, *replicas, stream);
    } else {
        kernels::embedding_bag_backward_fused(
            s.grad, s.table_offsets, s.feature_table, s.k_ids, s.k_offsets,
            s.k_psw.defined() ? &s.k_psw : nullptr, s.mode, optim, s.weights,
            s.state1.defined() ? &s.state1 : nullptr, s.state2.defined() ? &s.state2 : nullptr,
            s.workspace, stream);
    }
    if (s.cached)
        s.cached->mark_updated(stream);
}

}  // namespace

ShardedEmbeddingBagCollection::ShardedEmbeddingBagCollection(
    std::vector<EmbeddingBagConfig> tables,
    bool is_weighted,
    const ShardingPlan& plan,
    std::shared_ptr<comm::ProcessGroup> pg,
    uint64_t seed,
    const kernels::FusedOptimizerParams& optimizer,
    Device device,
    std::shared_ptr<comm::ProcessGroup> device_pg,
    QCommsConfig qcomms,
    std::string storage_dir,
    std::shared_ptr<comm::ProcessGroup> replica_pg,
    HierarchicalMode hierarchical,
    QuantizedShardRows quantized)
    : tables_(std::move(tables)),
      is_weighted_(is_weighted),
      position_weighted_(make_position_weighted_module(tables_)),
      device_(device),
      plan_(plan),
      pg_(std::move(pg)),
      device_pg_(std::move(device_pg)),
      qcomms_(qcomms),
      replica_pg_(replica_pg != nullptr && replica_pg->size() > 1 ? std::move(replica_pg)
                                                                  : nullptr),
      hierarchical_(hierarchical),
      optimizer_(optimizer),
      storage_dir_(storage_dir.empty() ? "" : own_storage_dir(storage_dir)),
      quantized_(std::move(quantized)) {
    SR_CHECK(!quantized_.enabled() || device_.is_cpu(),
             "quantized tables are looked up on the CPU only for now, not on {}", device_.str());
    SR_CHECK(plan.env.world_size == pg_->size(),
             "the sharding plan is for {} ranks, but {} ranks are running", plan.env.world_size,
             pg_->size());
    if (device_pg_ == nullptr) {
        device_pg_ = device_.is_cpu() ? pg_ : std::make_shared<comm::StagedProcessGroup>(pg_);
    }
    SR_CHECK(device_pg_->size() == pg_->size() && device_pg_->rank() == pg_->rank(),
             "ShardedEmbeddingBagCollection: the device group is rank {} of {}, the host group "
             "rank {} of {}",
             device_pg_->rank(), device_pg_->size(), pg_->rank(), pg_->size());
    SR_CHECK(replica_pg_ == nullptr || device_.is_cpu(),
             "ShardedEmbeddingBagCollection: replicated shardings (sharding.replica_groups) run "
             "on the CPU only for now, not on {}",
             device_.str());
    int64_t col = 0;
    for (size_t t = 0; t < tables_.size(); ++t) {
        for (const auto& f : tables_[t].feature_names) {
            names_.push_back(f);
            dims_.push_back(tables_[t].embedding_dim);
            key_col_.push_back(col);
            key_table_.push_back(static_cast<int64_t>(t));
            col += tables_[t].embedding_dim;
        }
    }
    build(plan, seed);
    warn_if_disk_short();
    for (size_t k = 0; k < names_.size(); ++k) {
        if (mean_after_sum(static_cast<int64_t>(k)))
            mean_keys_.push_back(static_cast<int64_t>(k));
    }
}

CommBytes ShardedEmbeddingBagCollection::pooled_comm_bytes() const {
    CommBytes total;
    auto add = [&total](const CommBytes& b) {
        total.forward += b.forward;
        total.backward += b.backward;
        total.forward_cross_node += b.forward_cross_node;
        total.backward_cross_node += b.backward_cross_node;
    };
    if (entries_->pooled_a2a)
        add(entries_->pooled_a2a->sent_bytes());
    if (entries_->hier_a2a)
        add(entries_->hier_a2a->sent_bytes());
    if (row_wise_->hier_reduce_scatter)
        add(row_wise_->hier_reduce_scatter->sent_bytes());
    if (row_wise_->reduce_scatter)
        add(row_wise_->reduce_scatter->sent_bytes());
    if (data_parallel_->all_gather)
        add(data_parallel_->all_gather->sent_bytes());
    return total;
}

// ---- forward ----

namespace {

// The ids of one bag that travel to `en`'s shard: all, or (TWRW) those of the shard's rows.
template <typename Fn>
void for_each_entry_id(const Entry& en, const int64_t* ids, int64_t begin, int64_t end, Fn fn) {
    for (int64_t i = begin; i < end; ++i) {
        if (!en.row_sharded || (ids[i] >= en.row_offset && ids[i] < en.row_offset + en.rows))
            fn(i);
    }
}

// What the entries path sends, written into `buf` (grow-only): every entry's bags, ids rebased to
// its shard.
KJTAllToAllInput entries_input(const KeyedJaggedTensor& kjt,
                               const std::vector<Entry>& entries,
                               const std::vector<std::string>& names,
                               SendBuffers& buf) {
    const int64_t B = kjt.stride();
    const int64_t* len = kjt.lengths().data<int64_t>();
    const int64_t* off = kjt.offsets().data<int64_t>();
    const int64_t* ids = kjt.values().data<int64_t>();
    const float* w = kjt.has_weights() ? kjt.weights().data<float>() : nullptr;
    const auto E = static_cast<int64_t>(entries.size());
    KJTAllToAllInput in;
    in.stride = B;
    in.lengths = grow_prefix(buf.lengths, E * B, DType::kI64);
    int64_t* lengths = in.lengths.data<int64_t>();
    int64_t total = 0;
    for (int64_t e = 0; e < E; ++e) {
        const Entry& en = entries[static_cast<size_t>(e)];
        in.keys.push_back(names[static_cast<size_t>(en.key)] + "@" + std::to_string(en.shard));
        const int64_t ki = kjt.key_index(names[static_cast<size_t>(en.key)]);
        for (int64_t b = 0; b < B; ++b) {
            int64_t n = 0;
            const int64_t begin = off[ki * B + b];
            for_each_entry_id(en, ids, begin, begin + len[ki * B + b], [&](int64_t) { ++n; });
            lengths[e * B + b] = n;
            total += n;
        }
    }
    in.values = grow_prefix(buf.values, total, DType::kI64);
    int64_t* values = in.values.data<int64_t>();
    float* weights = nullptr;
    if (w != nullptr) {
        in.weights = grow_prefix(buf.weights, total, DType::kF32);
        weights = in.weights->data<float>();
    }
    int64_t n = 0;
    for (const Entry& en : entries) {
        const int64_t ki = kjt.key_index(names[static_cast<size_t>(en.key)]);
        const int64_t begin = off[ki * B], end = off[(ki + 1) * B];
        for_each_entry_id(en, ids, begin, end, [&](int64_t i) {
            values[n] = ids[i] - en.row_offset;
            if (weights != nullptr)
                weights[n] = w[i];
            ++n;
        });
    }
    return in;
}

}  // namespace

// Pools every local shard for g.received into g.local_out [batch, sum local cols] on `device`.
static void run_lookups(ShardedEmbeddingBagCollection::Group& g,
                        const PositionWeightedModule* pw,
                        Device device,
                        Stream& stream) {
    int64_t cols = 0;
    for (const auto& s : g.local)
        cols += s.num_keys * s.cols;
    init::reuse_or_allocate(g.local_out, {g.received.stride(), cols}, device);
    int64_t col = 0;
    for (auto& s : g.local) {
        lookup_forward(s, g.received, pw, stream);
        copy_into_columns(g.local_out, col, s.out, stream);
        col += s.num_keys * s.cols;
    }
    stream.synchronize();  // the output dist reads local_out
}

// Sends d loss / d local_out back into every local shard: fused row updates (and position-weight
// gradients, see lookup_backward).
static void run_updates(ShardedEmbeddingBagCollection::Group& g,
                        const Tensor& grad_local,
                        const kernels::FusedOptimizerParams& optim,
                        PositionWeightedModule* pw,
                        float pw_grad_scale,
                        comm::ProcessGroup* replicas,
                        Stream& stream) {
    int64_t col = 0;
    for (auto& s : g.local) {
        init::reuse_or_allocate(s.grad, {grad_local.size(0), s.num_keys * s.cols},
                                s.weights.device());
        copy_from_columns(s.grad, grad_local, col, stream);
        lookup_backward(s, optim, pw, pw_grad_scale, replicas, stream);
        col += s.num_keys * s.cols;
    }
}

// ---- forward in stages ----

namespace {

using PathDist = ShardedEmbeddingBagCollection::PathInputDist;

void start_tensors(PathDist& p) {
    if (p.splits && !p.tensors) {
        p.tensors.emplace(p.splits->tensors());
        p.batch_size_per_rank = p.splits->splits().stride_per_rank;
    }
}

void wait_tensors(PathDist& p) {
    start_tensors(p);
    if (p.tensors && !p.received)
        p.received = p.tensors->wait();
}

// A buffer set of `pool` that no input dist holds (one only the pool holds), or a new one.
template <typename T>
std::shared_ptr<T> acquire(std::vector<std::shared_ptr<T>>& pool) {
    for (const auto& b : pool) {
        if (b.use_count() == 1)
            return b;
    }
    pool.push_back(std::make_shared<T>());
    return pool.back();
}

// The same feature tensors (the pipeline keeps its batches alive, so addresses are not reused).
bool same_features(const KeyedJaggedTensor& a, const KeyedJaggedTensor& b) {
    return a.stride() == b.stride() && a.values().data_ptr() == b.values().data_ptr() &&
           a.lengths().data_ptr() == b.lengths().data_ptr();
}

}  // namespace

std::unique_ptr<ShardedEmbeddingBagCollection::InputDist> ShardedEmbeddingBagCollection::input_dist(
    const KeyedJaggedTensor& input) {
    SR_CHECK(!input.variable_stride_per_key(),
             "ShardedEmbeddingBagCollection: a variable batch per key is not supported");
    SR_CHECK(input.has_weights() == is_weighted_,
             "ShardedEmbeddingBagCollection: the KJT is {}weighted "
             "but the collection is {}weighted",
             input.has_weights() ? "" : "not ", is_weighted_ ? "" : "not ");
    // Built from `kjt`: a default KeyedJaggedTensor would allocate three tensors per batch.
    auto dist = std::make_unique<InputDist>(InputDist{input, {}, {}, {}});
    // Position-weighted keys send each id's position in its bag as its weight.
    std::optional<KeyedJaggedTensor> with_positions;
    if (position_weighted_)
        with_positions.emplace(position_weighted_->with_positions(input, positions_buffer_));
    const KeyedJaggedTensor& kjt = with_positions ? *with_positions : input;
    if (!entries_->entries.empty()) {
        const std::shared_ptr<SendBuffers> buf = acquire(entries_->send_pool);
        dist->entries.send_buffers = buf;
        dist->entries.splits.emplace(
            entries_->a2a->start(entries_input(kjt, entries_->entries, names_, *buf)));
    }
    if (!row_wise_->keys.empty()) {
        std::vector<int64_t> index, block_sizes;
        for (int64_t k : row_wise_->keys) {
            index.push_back(kjt.key_index(names_[static_cast<size_t>(k)]));
            const auto& table = tables_[static_cast<size_t>(key_table_[static_cast<size_t>(k)])];
            block_sizes.push_back(row_block_size(table.num_embeddings, pg_->size()));
        }
        const std::shared_ptr<BucketizeBuffers> buf = acquire(row_wise_->bucketize_pool);
        dist->row_wise.send_buffers = buf;
        BucketizedKJT bucketized = bucketize_kjt_before_all2all(
            kjt.permute(index, &permuted_.acquire()), pg_->size(), block_sizes,
            /*output_permute=*/false, /*bucketize_pos=*/false, &*buf);
        dist->row_wise.splits.emplace(row_wise_->a2a->start(std::move(bucketized.features)));
    }
    if (!data_parallel_->keys.empty()) {  // every rank pools its own batch: nothing travels
        std::vector<int64_t> index;
        for (int64_t k : data_parallel_->keys)
            index.push_back(kjt.key_index(names_[static_cast<size_t>(k)]));
        dist->data_parallel.received = kjt.permute(index, &permuted_.acquire());
    }
    return dist;
}

void ShardedEmbeddingBagCollection::input_dist_start_tensors(InputDist& dist) {
    start_tensors(dist.entries);
    start_tensors(dist.row_wise);
}

void ShardedEmbeddingBagCollection::input_dist_wait(InputDist& dist) {
    wait_tensors(dist.entries);
    wait_tensors(dist.row_wise);
}

void ShardedEmbeddingBagCollection::set_pipelined_input(std::unique_ptr<InputDist> dist) {
    SR_CHECK(pipelined_ == nullptr,
             "ShardedEmbeddingBagCollection: a pipelined input is already queued");
    pipelined_ = std::move(dist);
}

KeyedTensor ShardedEmbeddingBagCollection::forward(const KeyedJaggedTensor& kjt, Stream& stream) {
    if (pipelined_ != nullptr && same_features(pipelined_->features, kjt))
        return compute_and_output_dist(std::move(pipelined_), stream);
    return compute_and_output_dist(input_dist(kjt), stream);
}

KeyedTensor ShardedEmbeddingBagCollection::compute_and_output_dist(std::unique_ptr<InputDist> dist,
                                                                   Stream& stream) {
    {
        profile::Range r("input_dist", stream);  // the host's wait for the features
        input_dist_wait(*dist);
    }
    count_input_bytes(*dist);
    if (prefetched_ != dist.get()) {  // another batch's rows were prefetched: fill again
        for (Group* g : {entries_.get(), row_wise_.get()}) {
            for (ShardLookup& s : g->local)
                s.prefetched = false;
        }
    }
    prefetched_ = nullptr;
    const KeyedJaggedTensor& kjt = dist->features;
    const int64_t B = kjt.stride();
    init::reuse_or_allocate(out_, {B, key_col_.empty() ? 0 : key_col_.back() + dims_.back()},
                            device_);
    out_.zero_(stream);
    make_mean_lengths(kjt, stream);  // backward() reads it again
    // The lookups below train on these; backward() reads them again.
    const std::pair<Group*, PathDist*> paths[] = {{entries_.get(), &dist->entries},
                                                  {row_wise_.get(), &dist->row_wise},
                                                  {data_parallel_.get(), &dist->data_parallel}};
    for (const auto& [g, p] : paths) {
        if (p->received) {
            g->received = std::move(*p->received);
            g->batch_size_per_rank = std::move(p->batch_size_per_rank);
        }
    }
    forward_entries(stream);
    forward_row_wise(stream);
    forward_data_parallel(stream);
    if (row_fetch_ && position_weighted_)  // pooled as one process pools: position weights first
        row_fetch_->forward(position_weighted_->forward(kjt), out_);
    else if (row_fetch_)
        row_fetch_->forward(kjt, out_);
    for (int64_t k : mean_keys_) {  // MEAN over row shards: the sum, divided by the bag length
        const Tensor lengths = mean_lengths(k);
        kernels::columns_axpy(out_, key_col_[static_cast<size_t>(k)], out_,
                              key_col_[static_cast<size_t>(k)], dims_[static_cast<size_t>(k)], 1.0f,
                              &lengths, kernels::ColumnsScale::kDivide, /*accumulate=*/false,
                              stream);
    }
    return KeyedTensor(names_, dims_, out_);
}

void ShardedEmbeddingBagCollection::make_mean_lengths(const KeyedJaggedTensor& kjt,
                                                      Stream& stream) {
    if (mean_keys_.empty())
        return;
    const int64_t B = kjt.stride();
    const auto M = static_cast<int64_t>(mean_keys_.size());
    Tensor host = grow_prefix(mean_lengths_host_, M * B, DType::kF32);
    float* lengths = host.data<float>();
    for (int64_t m = 0; m < M; ++m) {
        const int64_t ki = kjt.key_index(names_[static_cast<size_t>(mean_keys_[m])]);
        const int64_t* len = kjt.lengths().data<int64_t>() + ki * B;
        for (int64_t b = 0; b < B; ++b)
            lengths[m * B + b] = len[b] > 0 ? static_cast<float>(len[b]) : 1.0f;
    }
    if (device_.is_cpu()) {
        mean_lengths_ = host;
        return;
    }
    if (!mean_stager_)
        mean_stager_.emplace(device_);
    mean_stager_->begin(HostToDeviceStager::padded_bytes(host));
    Tensor staged = mean_stager_->copy(mean_lengths_buf_, host);
    mean_stager_->end(stream);
    mean_lengths_ = staged;
}

Tensor ShardedEmbeddingBagCollection::mean_lengths(int64_t key) const {
    const auto it = std::find(mean_keys_.begin(), mean_keys_.end(), key);
    SR_CHECK(it != mean_keys_.end(), "mean_lengths: key {} is not MEAN after a sum", key);
    const int64_t B = mean_lengths_.numel() / static_cast<int64_t>(mean_keys_.size());
    const int64_t m = it - mean_keys_.begin();
    return mean_lengths_.slice(m * B, (m + 1) * B);
}

bool ShardedEmbeddingBagCollection::mean_after_sum(int64_t key) const {
    return tables_[static_cast<size_t>(key_table_[static_cast<size_t>(key)])].pooling ==
               PoolingMode::kMean &&
           row_sharded_[static_cast<size_t>(key)];
}

void ShardedEmbeddingBagCollection::forward_entries(Stream& stream) {
    Group& g = *entries_;
    if (g.entries.empty())
        return;
    {
        profile::Range r("lookup", stream);
        run_lookups(g, position_weighted_.get(), device_, stream);
    }
    profile::Range r("output_dist", stream);
    const Tensor a_out = g.hier_a2a ? g.hier_a2a->forward(g.local_out, g.batch_size_per_rank)
                                    : g.pooled_a2a->forward(g.local_out, g.batch_size_per_rank);
    int64_t col = 0;
    for (const Entry& e : g.entries) {  // column shards placed, row shards (TWRW) summed
        kernels::columns_axpy(out_, key_col_[static_cast<size_t>(e.key)] + e.col_offset, a_out, col,
                              e.cols, 1.0f, nullptr, kernels::ColumnsScale::kDivide,
                              /*accumulate=*/true, stream);
        col += e.cols;
    }
}

void ShardedEmbeddingBagCollection::forward_row_wise(Stream& stream) {
    Group& g = *row_wise_;
    if (g.keys.empty())
        return;
    {
        profile::Range r("lookup", stream);
        run_lookups(g, position_weighted_.get(), device_, stream);
    }
    profile::Range r("output_dist", stream);
    const Tensor summed = g.hier_reduce_scatter
                              ? g.hier_reduce_scatter->forward(g.local_out, g.batch_size_per_rank)
                              : g.reduce_scatter->forward(g.local_out, g.batch_size_per_rank);
    int64_t col = 0;
    for (int64_t k : g.keys) {
        kernels::columns_axpy(out_, key_col_[static_cast<size_t>(k)], summed, col,
                              dims_[static_cast<size_t>(k)], 1.0f, nullptr,
                              kernels::ColumnsScale::kDivide, /*accumulate=*/true, stream);
        col += dims_[static_cast<size_t>(k)];
    }
}

void ShardedEmbeddingBagCollection::forward_data_parallel(Stream& stream) {
    Group& g = *data_parallel_;
    if (g.keys.empty())
        return;
    {
        profile::Range r("lookup", stream);
        run_lookups(g, position_weighted_.get(), device_, stream);
    }
    profile::Range r("output_dist", stream);
    int64_t col = 0;
    for (int64_t k : g.keys) {
        kernels::columns_axpy(out_, key_col_[static_cast<size_t>(k)], g.local_out, col,
                              dims_[static_cast<size_t>(k)], 1.0f, nullptr,
                              kernels::ColumnsScale::kDivide, /*accumulate=*/true, stream);
        col += dims_[static_cast<size_t>(k)];
    }
}

// ---- backward ----

void ShardedEmbeddingBagCollection::gather_grad(Group& g,
                                                const Tensor& grad,
                                                const std::vector<int64_t>& keys,
                                                const std::vector<int64_t>& col_offsets,
                                                const std::vector<int64_t>& widths,
                                                Stream& stream) {
    int64_t total = 0;
    for (int64_t w : widths)
        total += w;
    init::reuse_or_allocate(g.grad_out, {grad.size(0), total}, device_);
    int64_t col = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
        const int64_t k = keys[i];
        const Tensor lengths = mean_after_sum(k) ? mean_lengths(k) : Tensor();
        kernels::columns_axpy(
            g.grad_out, col, grad, key_col_[static_cast<size_t>(k)] + col_offsets[i], widths[i],
            1.0f, lengths.defined() ? &lengths : nullptr, kernels::ColumnsScale::kTimesReciprocal,
            /*accumulate=*/false, stream);
        col += widths[i];
    }
    stream.synchronize();  // the backward collective reads grad_out
}

void ShardedEmbeddingBagCollection::backward(const Tensor& grad_in, Stream& stream) {
    SR_CHECK(
        !quantized_.enabled(),
        "ShardedEmbeddingBagCollection: quantized tables are for inference; they do not train");
    SR_CHECK(out_.defined() && grad_in.shape() == out_.shape() && grad_in.device() == out_.device(),
             "ShardedEmbeddingBagCollection::backward: gradient {} for output {}", grad_in.str(),
             out_.str());
    const Tensor& grad = grad_in;
    // The backward collectives divide by the world size (gradient_division); the position-weight
    // gradients of their paths are scaled back so the dense all-reduce's mean sums the ranks'
    // parts (TorchRec scale_weight_gradients). The data-parallel path computes the whole
    // gradient on every rank.
    PositionWeightedModule* pw = position_weighted_.get();
    const float pw_scale = gradient_division() ? static_cast<float>(pg_->size()) : 1.0f;
    if (pw != nullptr)
        pw->zero_grad();
    if (!entries_->entries.empty()) {
        Group& g = *entries_;
        std::vector<int64_t> keys, offsets, widths;
        for (const Entry& e : g.entries) {
            keys.push_back(e.key);
            offsets.push_back(e.col_offset);
            widths.push_back(e.cols);
        }
        const Tensor grads = profile::timed("output_dist", stream, [&] {
            gather_grad(g, grad, keys, offsets, widths, stream);
            return g.hier_a2a ? g.hier_a2a->backward(g.grad_out)
                              : g.pooled_a2a->backward(g.grad_out);
        });
        profile::Range r("lookup", stream);  // the fused backward and update
        run_updates(g, grads, optimizer_, pw, pw_scale, replica_pg_.get(), stream);
    }
    if (!row_wise_->keys.empty()) {
        Group& g = *row_wise_;
        std::vector<int64_t> widths;
        for (int64_t k : g.keys)
            widths.push_back(dims_[static_cast<size_t>(k)]);
        const Tensor grads = profile::timed("output_dist", stream, [&] {
            gather_grad(g, grad, g.keys, std::vector<int64_t>(g.keys.size(), 0), widths, stream);
            return g.hier_reduce_scatter ? g.hier_reduce_scatter->backward(g.grad_out)
                                         : g.reduce_scatter->backward(g.grad_out);
        });
        profile::Range r("lookup", stream);
        run_updates(g, grads, optimizer_, pw, pw_scale, replica_pg_.get(), stream);
    }
    if (!data_parallel_->keys.empty()) {
        // Every replica applies the update of the global batch: gather every rank's ids and
        // gradients (divided by the world size when gradient_division() is on, as the other
        // paths' backward collectives do).
        Group& g = *data_parallel_;
        std::vector<int64_t> widths;
        for (int64_t k : g.keys)
            widths.push_back(dims_[static_cast<size_t>(k)]);
        std::optional<profile::Range> dist_range(std::in_place, "output_dist", stream);
        gather_grad(g, grad, g.keys, std::vector<int64_t>(g.keys.size(), 0), widths, stream);
        const GatheredKJT all = all_gather_kjt(
            *pg_, g.received, g.received.has_weights() ? &g.received.weights() : nullptr, g.gather);
        Tensor gathered = g.all_gather->forward(g.grad_out, all.batch_size_per_rank);
        if (gradient_division())
            divide_by_world(gathered, pg_->size(), stream);
        dist_range.reset();
        profile::Range r("lookup", stream);
        for (auto& s : g.local) {
            slice_bags(all.offsets.data<int64_t>(), all.stride, all.values,
                       all.payload.defined() ? &all.payload : nullptr, s.first_key, s.num_keys, s);
            if (!s.position_weights.empty())
                apply_position_weights(s, *pw);
            place_bags(s, stream);
        }
        run_updates(g, gathered, optimizer_, pw, 1.0f, replica_pg_.get(), stream);
    }
}

}  // namespace shardrec
