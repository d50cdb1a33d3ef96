// ShardedEmbeddingBagCollection inspection: the unsharded tables (tests), the local shards'
// placement and state (checkpoints), and the bytes they hold.
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/distributed/sharded_embedding_bag_collection_impl.h"

namespace shardrec {

Tensor ShardedEmbeddingBagCollection::unsharded_weight(int64_t table) const {
    const EmbeddingBagConfig& cfg = tables_.at(static_cast<size_t>(table));
    Tensor full = Tensor::zeros({cfg.num_embeddings, cfg.embedding_dim}, DType::kF32);
    float* f = full.data<float>();
    auto place = [&](const ShardLookup& s) {
        SR_CHECK(s.weights.dtype() == DType::kF32, "unsharded_weight: table '{}' is stored as {}",
                 cfg.name, dtype_name(s.weights.dtype()));
        Tensor host = s.weights.device().is_cpu() ? s.weights : s.weights.to(Device::cpu());
        if (s.cached) {  // every row, through the store
            s.cached->flush();
            std::vector<int64_t> rows(static_cast<size_t>(s.rows));
            for (int64_t r = 0; r < s.rows; ++r)
                rows[static_cast<size_t>(r)] = r;
            std::vector<Tensor> states;
            s.cached->read_rows(rows, host, states);
        }
        const float* src = host.data<float>();
        for (int64_t r = 0; r < s.rows; ++r) {
            for (int64_t c = 0; c < s.cols; ++c) {
                f[(s.row_offset + r) * cfg.embedding_dim + s.col_offset + c] = src[r * s.cols + c];
            }
        }
    };
    for (const Group* g : {entries_.get(), row_wise_.get()}) {
        for (const ShardLookup& s : g->local) {
            if (s.table == table)
                place(s);
        }
    }
    if (pg_->rank() == 0) {  // replicas are identical: one copy joins the sum
        for (const ShardLookup& s : data_parallel_->local) {
            if (s.table == table)
                place(s);
        }
    }
    pg_->all_reduce(full, comm::ReduceOp::kSum).wait();
    return full;
}

std::vector<EmbeddingShardState> ShardedEmbeddingBagCollection::shard_states() {
    std::vector<EmbeddingShardState> out;
    for (Group* g : {entries_.get(), row_wise_.get(), data_parallel_.get()}) {
        for (ShardLookup& s : g->local) {
            EmbeddingShardState st;
            st.table = s.table;
            st.row_offset = s.row_offset;
            st.rows = s.rows;
            st.col_offset = s.col_offset;
            st.cols = s.cols;
            // 2D: the groups after the first hold copies of the first group's shards.
            st.replicated =
                g == data_parallel_.get() || (replica_pg_ != nullptr && replica_pg_->rank() > 0);
            st.cached = s.cached.get();
            if (!s.cached) {
                st.weight = s.weights;
                for (const Tensor* state : {&s.state1, &s.state2}) {
                    if (state->defined())
                        st.optimizer_state.push_back(*state);
                }
            }
            st.optimizer_step = &s.step;
            out.push_back(std::move(st));
        }
    }
    return out;
}

std::vector<std::pair<std::string, CacheStats>> ShardedEmbeddingBagCollection::cache_stats() const {
    std::vector<std::pair<std::string, CacheStats>> out;
    for (const Group* g : {entries_.get(), row_wise_.get()}) {
        for (const ShardLookup& s : g->local) {
            if (s.cached) {
                out.emplace_back(fmt::format("{}@{}.{}", tables_[static_cast<size_t>(s.table)].name,
                                             s.row_offset, s.col_offset),
                                 s.cached->stats());
            }
        }
    }
    return out;
}

int64_t ShardedEmbeddingBagCollection::sum_over_caches(int64_t (CachedEmbeddingShard::*bytes)()
                                                           const) const {
    int64_t n = 0;
    for (const Group* g : {entries_.get(), row_wise_.get()}) {
        for (const ShardLookup& s : g->local)
            n += s.cached ? (s.cached.get()->*bytes)() : 0;
    }
    return n;
}

int64_t ShardedEmbeddingBagCollection::storage_disk_bytes() const {
    return sum_over_caches(&CachedEmbeddingShard::disk_bytes);
}

int64_t ShardedEmbeddingBagCollection::storage_host_bytes() const {
    return sum_over_caches(&CachedEmbeddingShard::store_host_bytes);
}

// A cached shard's memory is its cache (rows and state together, counted here).
int64_t ShardedEmbeddingBagCollection::parameter_bytes() const {
    int64_t n = row_fetch_ ? row_fetch_->stored_bytes() : 0;
    for (const Group* g : {entries_.get(), row_wise_.get(), data_parallel_.get()}) {
        for (const ShardLookup& s : g->local) {
            n += s.cached                 ? s.cached->cache_bytes()
                 : s.quant_rows.defined() ? static_cast<int64_t>(s.quant_rows.nbytes())
                                          : static_cast<int64_t>(s.weights.nbytes());
        }
    }
    return n;
}

void ShardedEmbeddingBagCollection::count_input_bytes(const InputDist& dist) {
    const int me = pg_->rank();
    const int local_size = node_local_size(*pg_);
    // Position-weighted keys send their ids' positions as weights.
    const int64_t id_bytes = 8 + (is_weighted_ || position_weighted_ ? 4 : 0);
    for (const PathInputDist* p : {&dist.entries, &dist.row_wise}) {
        if (!p->tensors)
            continue;
        const KJTAllToAllSplits& s = p->tensors->splits();
        for (size_t r = 0; r < s.lengths_input_splits.size(); ++r) {
            if (static_cast<int>(r) == me)
                continue;
            const int64_t bytes =
                8 * s.lengths_input_splits[r] + id_bytes * s.values_input_splits[r];
            input_bytes_.forward += bytes;
            if (static_cast<int>(r) / local_size != me / local_size)
                input_bytes_.forward_cross_node += bytes;
        }
    }
}

int64_t ShardedEmbeddingBagCollection::quant_bytes_read() const {
    int64_t n = row_fetch_ ? row_fetch_->bytes_read() : 0;
    for (const Group* g : {entries_.get(), row_wise_.get(), data_parallel_.get()}) {
        for (const ShardLookup& s : g->local)
            n += s.quant_bytes;
    }
    return n;
}

double ShardedEmbeddingBagCollection::quant_lookup_seconds() const {
    double t = row_fetch_ ? row_fetch_->read_seconds() : 0;
    for (const Group* g : {entries_.get(), row_wise_.get(), data_parallel_.get()}) {
        for (const ShardLookup& s : g->local)
            t += s.quant_seconds;
    }
    return t;
}

int64_t ShardedEmbeddingBagCollection::optimizer_state_bytes() const {
    int64_t n = 0;
    for (const Group* g : {entries_.get(), row_wise_.get(), data_parallel_.get()}) {
        for (const ShardLookup& s : g->local) {
            if (s.cached)
                continue;
            if (s.state1.defined())
                n += static_cast<int64_t>(s.state1.nbytes());
            if (s.state2.defined())
                n += static_cast<int64_t>(s.state2.nbytes());
        }
    }
    return n;
}

std::vector<Parameter*> ShardedEmbeddingBagCollection::parameters() {
    return position_weighted_ ? position_weighted_->parameters() : std::vector<Parameter*>{};
}

}  // namespace shardrec
