// Sharded EmbeddingBagCollection: the shards of this rank built from the plan (rows in memory, or
// behind a cache: key_value rows on disk, fused_uvm_caching rows in host memory), and the
// key_value files' directory.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <tuple>

#include "comm/mpi_env.h"
#include "engine/core/allocator.h"
#include "engine/distributed/quantized_row_fetch.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/distributed/sharded_embedding_bag_collection_impl.h"
#include "engine/modules/host_row_store.h"
#include "engine/modules/key_value_store.h"

namespace shardrec {

// ---- building the shards ----

// <path>/shardrec-<host>-<pid>-<n>: the n-th collection of this process (a process may hold
// several, each with files of its own).
std::string ShardedEmbeddingBagCollection::own_storage_dir(const std::string& path) {
    static std::atomic<int64_t> collections{0};
    return (std::filesystem::path(path) /
            fmt::format("shardrec-{}-{}-{}", comm::process_info().host, ::getpid(), collections++))
        .string();
}

namespace {

// Inference: the shard's rows as quantized (QuantizedShardRows), no optimizer state. A
// quantized row's scale and bias cover the whole row, so a shard of some of a table's columns
// (column_wise) holds its rows whole, as stored (mapped, not copied), and its lookups pool them
// whole and keep its columns: each pooled column adds the values the whole-row lookup adds.
void init_quantized_shard(ShardedEmbeddingBagCollection::ShardLookup& s,
                          const EmbeddingBagConfig& table,
                          const ParameterSharding& ps,
                          const QuantizedShardRows& quantized) {
    SR_CHECK(!is_cached_kernel(ps.compute_kernel),
             "table '{}' is {}: quantized tables are looked up in memory (compute_kernel fused)",
             table.name, compute_kernel_name(ps.compute_kernel));
    const kernels::QuantType type = quantized.type(s.table);
    const int64_t row_bytes = kernels::quant_row_bytes(type, table.embedding_dim);
    with_allocation_label(
        fmt::format("the quantized shard of table '{}' at rows {}, columns {} ({} rows)",
                    table.name, s.row_offset, s.col_offset, s.rows),
        [&] { s.quant_rows = quantized.rows(s.table, s.row_offset, s.rows); });
    SR_CHECK(s.quant_rows.dtype() == DType::kU8 && s.quant_rows.numel() == s.rows * row_bytes,
             "table '{}': the quantized rows of the shard at row {} are {}, not u8[{}]", table.name,
             s.row_offset, s.quant_rows.str(), s.rows * row_bytes);
    s.quant_offsets = Tensor::from_vector<int64_t>({0, s.rows * row_bytes});
    s.quant_types = Tensor::from_vector<uint8_t>({static_cast<uint8_t>(type)});
    s.quant_dims = Tensor::from_vector<int32_t>({0, static_cast<int32_t>(table.embedding_dim)});
    s.table_offsets = Tensor::from_vector<int64_t>({0, s.rows});
    s.feature_table = Tensor::zeros({s.num_keys}, DType::kI32);
}

void init_shard(ShardedEmbeddingBagCollection::ShardLookup& s,
                const EmbeddingBagConfig& table,
                uint64_t seed,
                const kernels::FusedOptimizerParams& optim,
                Device device,
                const ParameterSharding& ps,
                const std::string& storage_dir,
                int rank) {
    if (is_cached_kernel(ps.compute_kernel)) {
        CachedEmbeddingShard::Layout layout;
        layout.table = table.name;
        layout.table_index = s.table;
        layout.num_embeddings = table.num_embeddings;
        layout.row_offset = s.row_offset;
        layout.rows = s.rows;
        layout.col_offset = s.col_offset;
        layout.cols = s.cols;
        layout.dtype = table.data_type;
        layout.seed = seed;
        layout.rank = rank;
        layout.device = device;
        const std::string owner = CachedEmbeddingShard::owner(layout);
        const int64_t payload = CachedEmbeddingShard::payload_bytes(layout, optim);
        std::unique_ptr<RowStore> store;
        if (ps.compute_kernel == EmbeddingComputeKernel::kKeyValue) {
            SR_CHECK(device.is_cpu(), "table '{}': key_value tables are for the CPU, not {}",
                     table.name, device.str());
            SR_CHECK(!storage_dir.empty(), "table '{}' is key_value: give sharding.storage.path",
                     table.name);
            std::error_code ec;
            std::filesystem::create_directories(storage_dir, ec);
            SR_CHECK(!ec,
                     "table '{}' is key_value: cannot create its storage directory {} "
                     "(sharding.storage.path) on rank {}: {}",
                     table.name, storage_dir, rank, ec.message());
            const std::string path =
                (std::filesystem::path(storage_dir) /
                 fmt::format("{}.r{}.c{}.kv", table.name, s.row_offset, s.col_offset))
                    .string();
            store = std::make_unique<KeyValueStore>(path, owner, s.rows, payload);
        } else {
            SR_CHECK(device.is_cuda(),
                     "table '{}': fused_uvm_caching keeps a GPU's rows in host memory behind a "
                     "cache in HBM, and this rank runs on {}: use fused (rows in memory) or "
                     "key_value (rows on disk, a cache in memory)",
                     table.name, device.str());
            store = std::make_unique<HostRowStore>(owner, s.rows, payload);
        }
        with_allocation_label(
            fmt::format("the cache of table '{}' at rows {}, columns {} ({})", table.name,
                        s.row_offset, s.col_offset, compute_kernel_name(ps.compute_kernel)),
            [&] {
                s.cached = std::make_unique<CachedEmbeddingShard>(layout, *ps.cache_params, optim,
                                                                  std::move(store));
            });
        s.weights = s.cached->weights;
        s.state1 = s.cached->state1;
        s.state2 = s.cached->state2;
        s.table_offsets = s.cached->table_offsets;
        s.feature_table = Tensor::zeros({s.num_keys}, DType::kI32, device);
        return;
    }
    const bool uvm = ps.compute_kernel == EmbeddingComputeKernel::kFusedUvm;
    SR_CHECK(!uvm || device.is_cuda(),
             "table '{}': fused_uvm keeps a GPU's rows in host memory, and this rank runs on {}: "
             "use fused (rows in memory) or key_value (rows on disk, a cache in memory)",
             table.name, device.str());
    const std::string label = fmt::format(
        "the shard of table '{}' at rows {}, columns {} of shape [{}, {}] with its "
        "optimizer state{}",
        table.name, s.row_offset, s.col_offset, s.rows, s.cols, uvm ? " (fused_uvm)" : "");
    const auto make_rows = [&] {
        s.weights = Tensor::empty({s.rows, s.cols}, table.data_type, device);
        init_embedding_rows(s.weights, seed, s.table, s.row_offset, s.col_offset,
                            table.num_embeddings);
        kernels::make_optimizer_states(optim, s.rows, s.cols, s.state1, s.state2, device);
    };
    // fused_uvm: the same CUDA tensors and kernels, the bytes in mapped host memory.
    with_allocation_label(label,
                          [&] { uvm ? with_host_mapped_allocations(make_rows) : make_rows(); });
    s.table_offsets = Tensor::from_vector<int64_t>({0, s.rows}).to(device);
    s.feature_table = Tensor::zeros({s.num_keys}, DType::kI32, device);
}

// Consecutive keys that share a shard become one lookup (one fused update per shard, so a table
// serving several features aggregates their gradients per row, as one process does).
template <typename SameShard>
void group_lookups(std::vector<ShardedEmbeddingBagCollection::ShardLookup>& out,
                   int64_t key_index,
                   const ShardedEmbeddingBagCollection::ShardLookup& proto,
                   SameShard same) {
    if (!out.empty() && same(out.back())) {
        ++out.back().num_keys;
        return;
    }
    out.push_back({});
    auto& s = out.back();
    s.table = proto.table;
    s.row_offset = proto.row_offset;
    s.rows = proto.rows;
    s.col_offset = proto.col_offset;
    s.cols = proto.cols;
    s.mode = proto.mode;
    s.first_key = key_index;
    s.num_keys = 1;
}

}  // namespace

// Inference: a row-sharded table's shards for QuantizedRowFetch, this rank's rows as stored.
QuantizedRowFetch::Table ShardedEmbeddingBagCollection::quantized_fetch_table(
    int64_t t, const EmbeddingBagConfig& table, const ParameterSharding& ps, int me) const {
    SR_CHECK(!is_cached_kernel(ps.compute_kernel),
             "table '{}' is {}: quantized tables are looked up in memory (compute_kernel fused)",
             table.name, compute_kernel_name(ps.compute_kernel));
    QuantizedRowFetch::Table out;
    out.name = table.name;
    out.type = quantized_.type(t);
    out.num_embeddings = table.num_embeddings;
    out.dim = table.embedding_dim;
    for (const ShardMetadata& m : ps.sharding_spec) {
        QuantizedRowFetch::Shard s;
        s.row_offset = m.shard_offsets[0];
        s.rows = m.shard_sizes[0];
        s.rank = m.rank;
        if (s.rank == me) {
            with_allocation_label(
                fmt::format("the quantized shard of table '{}' at rows {} ({} rows)", table.name,
                            s.row_offset, s.rows),
                [&] { s.stored = quantized_.rows(t, s.row_offset, s.rows); });
        }
        out.shards.push_back(std::move(s));
    }
    return out;
}

void ShardedEmbeddingBagCollection::build(const ShardingPlan& plan, uint64_t seed) {
    const int me = pg_->rank(), world = pg_->size();
    entries_ = std::make_unique<Group>();
    row_wise_ = std::make_unique<Group>();
    data_parallel_ = std::make_unique<Group>();
    row_sharded_.assign(names_.size(), false);
    std::vector<QuantizedRowFetch::Table> fetch_tables;
    std::vector<QuantizedRowFetch::Feature> fetch_features;
    std::vector<int64_t> fetch_table_of(tables_.size(), -1);
    for (size_t k = 0; k < names_.size(); ++k) {
        const int64_t t = key_table_[k];
        const EmbeddingBagConfig& table = tables_[static_cast<size_t>(t)];
        const ParameterSharding& ps = plan.at(table.name);
        if (quantized_.enabled() && (ps.sharding_type == ShardingType::kRowWise ||
                                     ps.sharding_type == ShardingType::kTableRowWise)) {
            int64_t& ft = fetch_table_of[static_cast<size_t>(t)];
            if (ft < 0) {
                ft = static_cast<int64_t>(fetch_tables.size());
                fetch_tables.push_back(quantized_fetch_table(t, table, ps, me));
            }
            fetch_features.push_back({names_[k], ft, table.pooling, key_col_[k]});
            continue;
        }
        switch (ps.sharding_type) {
            case ShardingType::kRowWise:
                row_sharded_[k] = true;
                row_wise_->keys.push_back(static_cast<int64_t>(k));
                break;
            case ShardingType::kDataParallel:
                data_parallel_->keys.push_back(static_cast<int64_t>(k));
                break;
            default:
                row_sharded_[k] = ps.sharding_type == ShardingType::kTableRowWise;
                for (size_t s = 0; s < ps.sharding_spec.size(); ++s) {
                    const ShardMetadata& m = ps.sharding_spec[s];
                    entries_->entries.push_back(
                        {static_cast<int64_t>(k), t, static_cast<int64_t>(s), m.shard_offsets[0],
                         m.shard_sizes[0], m.shard_offsets[1], m.shard_sizes[1], m.rank,
                         ps.sharding_type == ShardingType::kTableRowWise});
                }
        }
    }
    // Entries go out ordered by destination; on a rank, the features of one shard are adjacent.
    std::stable_sort(entries_->entries.begin(), entries_->entries.end(),
                     [](const Entry& a, const Entry& b) {
                         return std::tie(a.dest, a.table, a.shard, a.key) <
                                std::tie(b.dest, b.table, b.shard, b.key);
                     });
    std::vector<int64_t> splits(static_cast<size_t>(world), 0),
        dim_sum(static_cast<size_t>(world), 0);
    int64_t mine = 0;
    for (const Entry& e : entries_->entries) {
        ++splits[static_cast<size_t>(e.dest)];
        dim_sum[static_cast<size_t>(e.dest)] += e.cols;
        entries_->cols += e.cols;
        if (e.dest != me)
            continue;
        ShardLookup proto;
        proto.table = e.table;
        proto.row_offset = e.row_offset;
        proto.rows = e.rows;
        proto.col_offset = e.col_offset;
        proto.cols = e.cols;
        proto.mode = e.row_sharded ? PoolingMode::kSum : tables_[e.table].pooling;
        group_lookups(entries_->local, mine++, proto, [&](const ShardLookup& s) {
            return s.table == e.table && s.row_offset == e.row_offset &&
                   s.col_offset == e.col_offset;
        });
    }
    // comm.hierarchical: rows split inside a node (row_wise, or TWRW shards of one table on
    // two ranks of a node) add their partial sums there before they cross nodes.
    const int local_size = node_local_size(*device_pg_);
    bool rows_split_in_node = !row_wise_->keys.empty();
    std::vector<std::vector<PooledSegment>> segments(static_cast<size_t>(world));
    for (const Entry& e : entries_->entries) {
        segments[static_cast<size_t>(e.dest)].push_back({e.cols, e.row_sharded ? e.key : -1});
        for (const Entry& o : entries_->entries) {
            rows_split_in_node =
                rows_split_in_node || (e.row_sharded && o.key == e.key && o.dest != e.dest &&
                                       o.dest / local_size == e.dest / local_size);
        }
    }
    hierarchical_on_ = use_hierarchical(hierarchical_, world, local_size, rows_split_in_node);
    NodeGroups nodes;
    if (hierarchical_on_)
        nodes = make_node_groups(*device_pg_, local_size);
    if (!entries_->entries.empty()) {
        entries_->a2a = std::make_unique<KJTAllToAll>(pg_, splits);
        if (hierarchical_on_)
            entries_->hier_a2a =
                std::make_unique<HierarchicalPooledAllToAll>(nodes, segments, qcomms_);
        else
            entries_->pooled_a2a =
                std::make_unique<PooledEmbeddingsAllToAll>(device_pg_, dim_sum, qcomms_);
    }
    // Row-wise: every rank holds block `me` of every row-wise table, keys ordered by table.
    for (size_t i = 0; i < row_wise_->keys.size(); ++i) {
        const int64_t k = row_wise_->keys[i];
        const EmbeddingBagConfig& table = tables_[static_cast<size_t>(key_table_[k])];
        const int64_t bs = row_block_size(table.num_embeddings, world);
        ShardLookup proto;
        proto.table = key_table_[k];
        proto.row_offset = std::min<int64_t>(bs * me, table.num_embeddings);
        proto.rows = std::min<int64_t>(bs, table.num_embeddings - proto.row_offset);
        proto.cols = table.embedding_dim;
        proto.mode = PoolingMode::kSum;
        group_lookups(row_wise_->local, static_cast<int64_t>(i), proto,
                      [&](const ShardLookup& s) { return s.table == proto.table; });
        row_wise_->cols += table.embedding_dim;
    }
    if (!row_wise_->keys.empty()) {
        row_wise_->a2a = std::make_unique<KJTAllToAll>(
            pg_, std::vector<int64_t>(static_cast<size_t>(world),
                                      static_cast<int64_t>(row_wise_->keys.size())));
        if (hierarchical_on_)
            row_wise_->hier_reduce_scatter =
                std::make_unique<HierarchicalReduceScatter>(nodes, qcomms_);
        else
            row_wise_->reduce_scatter =
                std::make_unique<PooledEmbeddingsReduceScatter>(device_pg_, qcomms_);
    }
    // Data parallel: the whole table on every rank.
    for (size_t i = 0; i < data_parallel_->keys.size(); ++i) {
        const int64_t k = data_parallel_->keys[i];
        const EmbeddingBagConfig& table = tables_[static_cast<size_t>(key_table_[k])];
        ShardLookup proto;
        proto.table = key_table_[k];
        proto.rows = table.num_embeddings;
        proto.cols = table.embedding_dim;
        proto.mode = table.pooling;
        group_lookups(data_parallel_->local, static_cast<int64_t>(i), proto,
                      [&](const ShardLookup& s) { return s.table == proto.table; });
        data_parallel_->cols += table.embedding_dim;
    }
    if (!data_parallel_->keys.empty()) {
        data_parallel_->all_gather =
            std::make_unique<PooledEmbeddingsAllGather>(device_pg_, qcomms_);
    }
    for (Group* g : {entries_.get(), row_wise_.get(), data_parallel_.get()}) {
        for (ShardLookup& s : g->local) {
            const EmbeddingBagConfig& table = tables_[static_cast<size_t>(s.table)];
            if (quantized_.enabled())
                init_quantized_shard(s, table, plan.at(table.name), quantized_);
            else
                init_shard(s, table, seed, optimizer_, device_, plan.at(table.name), storage_dir_,
                           me);
        }
    }
    if (!fetch_features.empty()) {
        row_fetch_ = std::make_unique<QuantizedRowFetch>(pg_, std::move(fetch_tables),
                                                         std::move(fetch_features));
    }
    // The position weights of each received key of a position-weighted shard.
    std::vector<int64_t> entries_keys;
    for (const Entry& e : entries_->entries) {
        if (e.dest == me)
            entries_keys.push_back(e.key);
    }
    const std::pair<Group*, const std::vector<int64_t>*> received_keys[] = {
        {entries_.get(), &entries_keys},
        {row_wise_.get(), &row_wise_->keys},
        {data_parallel_.get(), &data_parallel_->keys}};
    for (const auto& [g, keys] : received_keys) {
        for (ShardLookup& s : g->local) {
            if (tables_[static_cast<size_t>(s.table)].position_weights == 0)
                continue;
            for (int64_t j = s.first_key; j < s.first_key + s.num_keys; ++j) {
                s.position_weights.push_back(position_weighted_->feature_index(
                    names_[static_cast<size_t>((*keys)[static_cast<size_t>(j)])]));
            }
        }
    }
}

// The key_value files are scratch (checkpoints hold the rows): they go with the collection.
ShardedEmbeddingBagCollection::~ShardedEmbeddingBagCollection() {
    if (!storage_dir_.empty() && std::filesystem::exists(storage_dir_)) {
        std::error_code ec;
        std::filesystem::remove_all(storage_dir_, ec);
    }
}

}  // namespace shardrec
