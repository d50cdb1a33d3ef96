#include "engine/distributed/planner_estimate.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "engine/core/error.h"
#include "engine/distributed/hierarchical_pooled.h"
#include "kernels/qcomm_codec.h"

namespace shardrec {

namespace {

constexpr double kIdBytes = 8.0;          // int64 ids
constexpr double kLengthBytes = 8.0;      // one length per bag
constexpr double kWeightBytes = 4.0;      // per id of a weighted feature
constexpr double kSortBytesPerId = 32.0;  // backward radix sort of (id, position), 2 passes r+w
constexpr double kGB = 1e9;
constexpr double kPageBytes = 4096.0;       // the unit of disk_bw_gbps's random reads
constexpr double kMaxMemoryBytes = 4.0e18;  // below INT64_MAX with room to sum a few

double element_bytes(const std::string& data_type) {
    return data_type == "f32" ? 4.0 : 2.0;
}

int64_t num_features(const ModelConfig& model) {
    int64_t f = 0;
    for (const auto& t : model.tables) {
        f += static_cast<int64_t>(t.feature_names.size());
    }
    return f;
}

// The dense part's shape: forward FLOPs per sample, parameters, and the (in, out) of its largest
// linear layer.
struct DenseShape {
    double flops = 0;
    int64_t params = 0;
    std::array<int64_t, 2> largest{0, 0};

    void linear(int64_t in, int64_t out) {
        if (in * out > largest[0] * largest[1])
            largest = {in, out};
    }
};

// A chain of linear layers from `in` through `sizes`.
void add_mlp(int64_t in, const std::vector<int64_t>& sizes, DenseShape& shape) {
    for (int64_t out : sizes) {
        shape.flops += 2.0 * static_cast<double>(in) * static_cast<double>(out);
        shape.params += in * out + out;
        shape.linear(in, out);
        in = out;
    }
}

// Following the modules' shapes.
DenseShape dense_shape(const ModelConfig& model) {
    DenseShape shape;
    double& flops = shape.flops;
    int64_t& params = shape.params;
    const int64_t d = model.tables.empty() ? 0 : model.tables.front().embedding_dim;
    const int64_t f = num_features(model);
    const int64_t n = (f + 1) * d;  // concat(dense, pooled)
    add_mlp(model.dense_in_features, model.bottom_mlp, shape);
    int64_t over_in = 0;
    if (model.type == "dlrm") {
        flops += 2.0 * static_cast<double>((f + 1) * (f + 1) * d);  // pairwise dots
        over_in = d + f * (f + 1) / 2;
    } else if (model.type == "dlrm_dcn") {
        const int64_t r = model.dcn.low_rank;
        flops += static_cast<double>(model.dcn.num_layers) * (4.0 * n * r + 4.0 * n);
        params += model.dcn.num_layers * (2 * n * r + n);
        shape.linear(n, r);
        over_in = n;
    } else {  // deepfm: the deep MLP and the FM over concat(dense, pooled)
        add_mlp(n, model.deepfm.hidden, shape);
        flops += 4.0 * static_cast<double>(n);
        over_in = d + model.deepfm.hidden.back() + 1;
    }
    add_mlp(over_in, model.top_mlp, shape);
    return shape;
}

// Activation floats per sample: every layer's output plus the interaction's input.
double dense_activations_per_sample(const ModelConfig& model) {
    double floats = 0;
    for (int64_t s : model.bottom_mlp)
        floats += static_cast<double>(s);
    for (int64_t s : model.top_mlp)
        floats += static_cast<double>(s);
    const int64_t d = model.tables.empty() ? 0 : model.tables.front().embedding_dim;
    const double n = static_cast<double>((num_features(model) + 1) * d);
    floats += model.type == "dlrm_dcn" ? n * (model.dcn.num_layers + 1) : 2.0 * n;
    return floats;
}

}  // namespace

RankCost& RankCost::operator+=(const RankCost& other) {
    memory_bytes += other.memory_bytes;
    host_bytes += other.host_bytes;
    disk_bytes += other.disk_bytes;
    lookup_s += other.lookup_s;
    disk_s += other.disk_s;
    prefetch_s += other.prefetch_s;
    comm_s += other.comm_s;
    dense_s += other.dense_s;
    return *this;
}

double OptionCost::total_s(int world_size) const {
    double t = every_rank.total_s() * world_size;
    for (const RankCost& s : shards) {
        t += s.total_s();
    }
    return t;
}

double CostModel::dense_flops_per_sample(const ModelConfig& model) {
    return dense_shape(model).flops;
}

int64_t CostModel::dense_parameters(const ModelConfig& model) {
    return dense_shape(model).params;
}

std::array<int64_t, 2> CostModel::largest_linear(const ModelConfig& model) {
    return dense_shape(model).largest;
}

SparseTraffic CostModel::sparse_traffic(const Config& config, const KeyedJaggedTensor& features) {
    const std::string& sparse = config.optimizer.sparse.type;
    const double state_per_element = state_bytes_per_element(sparse);
    const double state_per_row = state_bytes_per_row(sparse);
    const int64_t* values = features.values().data<int64_t>();
    SparseTraffic t;
    for (const ModelConfig::Table& table : config.model.tables) {
        const auto d = static_cast<double>(table.embedding_dim);
        const double row = d * element_bytes(table.data_type);
        const bool weighted = table.weighted || table.position_weights > 0;  // per-id weights read
        const double id = kIdBytes + (weighted ? kWeightBytes : 0.0);
        std::unordered_set<int64_t> rows;
        for (const std::string& name : table.feature_names) {
            const auto k = static_cast<size_t>(features.key_index(name));
            const auto bags = static_cast<double>(features.stride_per_key()[k]);
            const int64_t begin = features.offset_per_key()[k];
            const int64_t n = features.length_per_key()[k];
            rows.insert(values + begin, values + begin + n);
            t.ids += n;
            const double pooled = bags * d * 4.0, lengths = bags * kLengthBytes;
            t.lookup_bytes += static_cast<double>(n) * (row + id) + lengths + pooled;
            t.update_bytes += pooled + static_cast<double>(n) * id + lengths;
        }
        t.rows_touched += static_cast<int64_t>(rows.size());
        t.update_bytes +=
            static_cast<double>(rows.size()) * 2.0 * (row + state_per_element * d + state_per_row);
    }
    return t;
}

CacheUse predicted_cache_use(int64_t rows, int64_t slots, double alpha, double ids) {
    if (slots >= rows)
        return {};
    // The generator's continuous law on [1, E + 1): rank r has mass F(r + 2) - F(r + 1).
    const double e = static_cast<double>(rows);
    const auto cdf = [&](double x) {
        return std::fabs(alpha - 1.0) < 1e-12
                   ? std::log(x) / std::log(e + 1.0)
                   : (std::pow(x, 1.0 - alpha) - 1.0) / (std::pow(e + 1.0, 1.0 - alpha) - 1.0);
    };
    // Ranks one by one while a row is likely in a batch, then in blocks growing by 1 %, where
    // 1 - (1 - p)^n ~ n p is summed as n times the block's mass.
    double hits = 0, distinct = 0;
    double r = 0;
    while (r < e) {
        const double step = r < 1e5 ? 1.0 : std::max(1.0, std::floor(r * 0.01));
        const double end = std::min(e, r + step);
        const double mass = cdf(end + 1.0) - cdf(r + 1.0);
        const double seen = step == 1.0 ? 1.0 - std::pow(1.0 - mass, ids) : ids * mass;
        distinct += seen;
        if (end <= static_cast<double>(slots))
            hits += seen;
        else if (r < static_cast<double>(slots))
            hits += seen * (static_cast<double>(slots) - r) / (end - r);
        r = end;
    }
    return {distinct, hits};
}

double CostModel::record_bytes(const ModelConfig::Table& table,
                               int64_t cols,
                               const std::string& sparse_optimizer) {
    const double c = static_cast<double>(cols);
    const double payload = c * element_bytes(table.data_type) +
                           state_bytes_per_element(sparse_optimizer) * c +
                           state_bytes_per_row(sparse_optimizer);
    return std::ceil((std::max(payload, 1.0) + 8.0) / 8.0) * 8.0;
}

double CostModel::miss_s(const ModelConfig::Table& table,
                         EmbeddingComputeKernel kernel,
                         double rows,
                         double cols,
                         double ids) const {
    const auto r = static_cast<int64_t>(rows);
    const auto slots = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(load_factor_.at(table.name) * std::max(rows, 1.0))));
    CacheUse use = predicted_cache_use(r, slots, zipf_alpha_, ids);
    const TableIdStatistics* measured = find_statistics(stats_, table.name);
    if (measured != nullptr && slots < r && measured->ids_per_batch() > 0) {
        // The sample's distinct rows scaled to this shard's share of the ids, the hit rate of
        // the table's cache at the same load factor.
        use.distinct = measured->distinct_per_batch() * ids / measured->ids_per_batch();
        const auto table_slots = static_cast<int64_t>(
            std::ceil(load_factor_.at(table.name) * static_cast<double>(table.num_embeddings)));
        use.hits = use.distinct * measured->hit_rate(table_slots);
    }
    const double record = record_bytes(table, static_cast<int64_t>(cols), sparse_optimizer_);
    const double misses = use.distinct - use.hits;
    if (kernel == EmbeddingComputeKernel::kFusedUvmCaching)  // rows over the host link
        return misses * 2.0 * record / (topology_.host_to_device_bw_gbps * kGB);
    const double io = std::ceil(record / kPageBytes) * kPageBytes;  // a random read costs pages
    return misses * 2.0 * io / (topology_.disk_bw_gbps * kGB);
}

double CostModel::state_bytes_per_element(const std::string& sparse_optimizer) {
    return sparse_optimizer == "adagrad" ? 4.0 : sparse_optimizer == "adam" ? 8.0 : 0.0;
}

double CostModel::state_bytes_per_row(const std::string& sparse_optimizer) {
    return sparse_optimizer == "rowwise_adagrad" ? 4.0 : 0.0;
}

CostModel::CostModel(const Config& config, const Topology& topology, const CacheStatistics* stats)
    : topology_(topology), batch_size_(config.data.batch_size), stats_(stats) {
    for (const ModelConfig::Table& t : config.model.tables) {
        load_factor_[t.name] = config.sharding.cache_of(t.name).load_factor;
        if (config.sharding.cache_of(t.name).algorithm == "lfu")
            lfu_.insert(t.name);
    }
    prefetch_pipeline_ = config.sharding.cache.prefetch_pipeline;
    const std::string& sparse = config.optimizer.sparse.type;
    sparse_optimizer_ = sparse;
    zipf_alpha_ = config.data.type == "synthetic" ? config.data.synthetic.zipf_alpha : 0.0;
    state_bytes_per_element_ = state_bytes_per_element(sparse);
    state_bytes_per_row_ = state_bytes_per_row(sparse);
    const std::string& dense = config.optimizer.dense.type;
    dense_state_factor_ = dense == "adagrad" ? 1.0 : dense == "adam" ? 2.0 : 0.0;

    const double b = static_cast<double>(batch_size_);
    const double flops = dense_flops_per_sample(config.model);
    const auto params = static_cast<double>(dense_parameters(config.model));
    dense_.dense_s = 3.0 * flops * b / (topology.device_gflops * kGB);  // backward = 2x forward
    forward_wire_ = kernels::comm_type_from_name(config.comm.qcomms.forward);
    backward_wire_ = kernels::comm_type_from_name(config.comm.qcomms.backward);
    // comm.hierarchical as the collection resolves it for a row_wise table, whose rows are
    // always split inside a node of several ranks.
    hierarchical_ = use_hierarchical(hierarchical_mode_from_name(config.comm.hierarchical),
                                     topology.world_size, topology.local_size,
                                     topology.local_size > 1);
    const double grad_bytes = config.comm.allreduce_precision == "fp32" ? 4.0 : 2.0;
    dense_.comm_s = all_reduce_s(params * grad_bytes);
    dense_.memory_bytes =
        static_cast<int64_t>(params * 4.0 * (2.0 + dense_state_factor_) +
                             2.0 * 4.0 * b * dense_activations_per_sample(config.model));
}

double CostModel::a2a_s(double bytes) const {
    const double w = topology_.world_size;
    const auto l = static_cast<double>(topology_.local_size);
    const double intra = bytes * (l - 1.0) / w / (topology_.intra_node_bw_gbps * kGB);
    const double cross = bytes * (w - l) / w / (topology_.cross_node_bw_gbps * kGB);
    return std::max(intra, cross);
}

double CostModel::hierarchical_s(double bytes, double wire) const {
    const auto l = static_cast<double>(topology_.local_size);
    const double nodes = topology_.num_nodes();
    return (l - 1.0) / l * bytes / (topology_.intra_node_bw_gbps * kGB) +
           (nodes - 1.0) / nodes * wire / l / (topology_.cross_node_bw_gbps * kGB);
}

double CostModel::wire_bytes(kernels::CommType type, double bags, int64_t cols) {
    return bags * static_cast<double>(kernels::qcomm_row_bytes(type, cols));
}

double CostModel::all_reduce_s(double bytes) const {
    // Reduce-scatter and all-gather inside the node, then an all-reduce of each rank's 1/L slice
    // across the nodes (what NCCL's ring/tree achieve on such a machine).
    const auto l = static_cast<double>(topology_.local_size);
    const double nodes = topology_.num_nodes();
    const double intra = 2.0 * (l - 1.0) / l * bytes / (topology_.intra_node_bw_gbps * kGB);
    const double cross =
        2.0 * (nodes - 1.0) / nodes * bytes / l / (topology_.cross_node_bw_gbps * kGB);
    return intra + cross;
}

double CostModel::shard_storage_bytes(const ModelConfig::Table& table,
                                      EmbeddingComputeKernel kernel,
                                      int64_t rows,
                                      int64_t cols) const {
    const double r = static_cast<double>(rows);
    const double c = static_cast<double>(cols);
    const double row =
        c * element_bytes(table.data_type) + state_bytes_per_element_ * c + state_bytes_per_row_;
    // A cached table holds its cache here (the rows live in the slower tier), the store's index
    // (4 bytes a row, engine/modules/key_value_store.h) and with LFU a count a row (4 bytes).
    if (is_cached_kernel(kernel))
        return std::ceil(r * load_factor_.at(table.name)) * row +
               (lfu_.count(table.name) ? 8.0 : 4.0) * r;
    return r * row + (kernel == EmbeddingComputeKernel::kDense ? r * c * 4.0 : 0.0);
}

RankCost CostModel::shard_cost(const ModelConfig::Table& table,
                               ShardingType type,
                               EmbeddingComputeKernel kernel,
                               int64_t rows,
                               int64_t cols) const {
    const double w = topology_.world_size;
    const auto l = static_cast<double>(topology_.local_size);
    const double e = static_cast<double>(table.num_embeddings);
    const double s = element_bytes(table.data_type);
    const double f = static_cast<double>(table.feature_names.size());
    const bool dp = type == ShardingType::kDataParallel;
    const bool by_rows = type == ShardingType::kRowWise || type == ShardingType::kTableRowWise;
    // Bags this shard pools, and the ids it receives.
    const double bags = (dp ? 1.0 : w) * static_cast<double>(batch_size_) * f;
    const double ids =
        bags * table.pooling_factor * (by_rows ? static_cast<double>(rows) / e : 1.0);
    const double id_bytes = kIdBytes + (table.weighted ? kWeightBytes : 0.0);
    const double r = static_cast<double>(rows);
    const double c = static_cast<double>(cols);
    const double state_row = state_bytes_per_element_ * c + state_bytes_per_row_;

    RankCost cost;
    const double fwd = ids * (c * s + id_bytes) + bags * c * 4.0;
    double bwd = bags * c * 4.0 + ids * (2.0 * (c * s + state_row) + kSortBytesPerId);
    const double memory = shard_storage_bytes(table, kernel, rows, cols) + ids * id_bytes +
                          bags * kLengthBytes + 2.0 * bags * c * 4.0;
    if (kernel == EmbeddingComputeKernel::kDense) {
        // Gradients land in a dense [rows, cols] buffer that the optimizer sweeps whole.
        bwd = bags * c * 4.0 + ids * c * 8.0 +
              r * c * (4.0 + 2.0 * s + 2.0 * state_bytes_per_element_);
    }
    // Saturated: the conversion of a larger double is undefined, and such a table fits nowhere.
    const auto saturate = [](double b) {
        return static_cast<int64_t>(std::min(b, kMaxMemoryBytes));
    };
    if (kernel == EmbeddingComputeKernel::kFusedUvm && topology_.compute_device == "cuda") {
        // The rows and their state cross the host link (forward reads, backward r+w); the
        // pooled rows, ids and sort stay in HBM.
        const double host = ids * (c * s + 2.0 * (c * s + state_row));
        cost.lookup_s = (fwd + bwd - host) / (topology_.device_memory_bw_gbps * kGB) +
                        host / (topology_.host_to_device_bw_gbps * kGB);
        const double storage = shard_storage_bytes(table, kernel, rows, cols);
        cost.host_bytes = saturate(storage);
        cost.memory_bytes = saturate(memory - storage);
    } else {
        cost.lookup_s = (fwd + bwd) / (topology_.device_memory_bw_gbps * kGB);
        cost.memory_bytes = saturate(memory);
    }
    if (is_cached_kernel(kernel)) {
        // The slower tier: key_value's file on disk, fused_uvm_caching's rows in host memory.
        const int64_t rows_bytes = saturate(r * record_bytes(table, cols, sparse_optimizer_));
        if (kernel == EmbeddingComputeKernel::kKeyValue)
            cost.disk_bytes = rows_bytes;
        else
            cost.host_bytes = rows_bytes;
        (prefetch_pipeline_ ? cost.prefetch_s : cost.disk_s) = miss_s(table, kernel, r, c, ids);
    }

    // This shard's pooled rows (forward) and their gradients (backward): f32 inside a node's
    // hierarchical step, as comm.qcomms encodes them on the wire otherwise.
    const double out_bytes = bags * c * 4.0;
    const double fwd_out = wire_bytes(forward_wire_, bags, cols);
    const double bwd_out = wire_bytes(backward_wire_, bags, cols);
    const double in_bytes = ids * id_bytes + bags * kLengthBytes;
    switch (type) {
        case ShardingType::kTableWise:
        case ShardingType::kColumnWise:
            cost.comm_s = a2a_s(in_bytes) + a2a_s(bwd_out);
            break;
        case ShardingType::kRowWise:
            cost.comm_s = a2a_s(in_bytes) + (hierarchical_ ? hierarchical_s(out_bytes, fwd_out) +
                                                                 hierarchical_s(out_bytes, bwd_out)
                                                           : a2a_s(fwd_out) + a2a_s(bwd_out));
            break;
        case ShardingType::kTableRowWise:
            cost.comm_s = a2a_s(in_bytes) + a2a_s(bwd_out / l) +
                          2.0 * (l - 1.0) / l * out_bytes / (topology_.intra_node_bw_gbps * kGB);
            break;
        case ShardingType::kDataParallel:
            cost.comm_s = all_reduce_s(r * c * 4.0);
            break;
    }
    return cost;
}

OptionCost CostModel::table_cost(const ModelConfig::Table& table,
                                 ShardingType type,
                                 EmbeddingComputeKernel kernel,
                                 const std::vector<std::array<int64_t, 2>>& shard_sizes) const {
    OptionCost cost;
    if (type == ShardingType::kDataParallel) {
        const RankCost replica =
            shard_cost(table, type, kernel, table.num_embeddings, table.embedding_dim);
        cost.shards.assign(static_cast<size_t>(topology_.world_size), replica);
        return cost;
    }
    for (const auto& size : shard_sizes) {
        cost.shards.push_back(shard_cost(table, type, kernel, size[0], size[1]));
    }
    if (type != ShardingType::kRowWise) {
        // Every rank receives its samples' pooled rows of this table (output all-to-all).
        const double bags = static_cast<double>(batch_size_) *
                            static_cast<double>(table.feature_names.size());
        const double mine = bags * static_cast<double>(table.embedding_dim) * 4.0;
        cost.every_rank.comm_s = a2a_s(wire_bytes(forward_wire_, bags, table.embedding_dim));
        cost.every_rank.memory_bytes = static_cast<int64_t>(2.0 * mine);
    }
    return cost;
}

OptionCost CostModel::table_cost(const ModelConfig::Table& table,
                                 const ParameterSharding& ps) const {
    std::vector<std::array<int64_t, 2>> sizes;
    for (const ShardMetadata& s : ps.sharding_spec) {
        sizes.push_back(s.shard_sizes);
    }
    return table_cost(table, ps.sharding_type, ps.compute_kernel, sizes);
}

double PlanEstimate::step_time_s() const {
    double t = 0;
    for (const RankCost& r : ranks) {
        t = std::max(t, r.total_s());
    }
    return t;
}

int64_t PlanEstimate::max_memory_bytes() const {
    int64_t m = 0;
    for (const RankCost& r : ranks) {
        m = std::max(m, r.memory_bytes);
    }
    return m;
}

int64_t PlanEstimate::max_host_bytes() const {
    int64_t m = 0;
    for (const RankCost& r : ranks)
        m = std::max(m, r.host_bytes);
    return m;
}

int64_t PlanEstimate::max_disk_bytes() const {
    int64_t m = 0;
    for (const RankCost& r : ranks)
        m = std::max(m, r.disk_bytes);
    return m;
}

PlanEstimate estimate_plan(const ShardingPlan& plan,
                           const Config& config,
                           const Topology& topology,
                           const CacheStatistics* stats) {
    SR_CHECK(plan.env.world_size == topology.world_size,
             "the plan is for {} ranks, the topology for {}", plan.env.world_size,
             topology.world_size);
    const CostModel model(config, topology, stats);
    PlanEstimate estimate;
    estimate.memory_limit_bytes = topology.memory_limit_bytes();
    estimate.host_limit_bytes = topology.host_limit_bytes();
    estimate.disk_limit_bytes = topology.disk_limit_bytes();
    estimate.ranks.assign(static_cast<size_t>(topology.world_size), model.dense_cost());
    for (const ModelConfig::Table& table : config.model.tables) {
        const ParameterSharding& ps = plan.at(table.name);
        const OptionCost cost = model.table_cost(table, ps);
        for (RankCost& r : estimate.ranks) {
            r += cost.every_rank;
        }
        for (size_t i = 0; i < cost.shards.size(); ++i) {
            const int rank = ps.sharding_type == ShardingType::kDataParallel
                                 ? static_cast<int>(i)
                                 : ps.sharding_spec[i].rank;
            estimate.ranks[static_cast<size_t>(rank)] += cost.shards[i];
        }
    }
    return estimate;
}

}  // namespace shardrec
