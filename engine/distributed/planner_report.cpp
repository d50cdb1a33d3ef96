// The text report of a plan's estimate (planner.h: estimate_report).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "engine/distributed/planner.h"
#include "engine/modules/managed_collision.h"

namespace shardrec {

namespace {

constexpr double kGiB = 1073741824.0;

constexpr double kMiB = 1048576.0;

// Memory is shown in GiB, or in MiB when every rank holds less than 1 GiB. The misses column
// (cached tables: disk or host-link time, with the prefetch pipeline's) only when a plan has one.
std::string rank_row(
    const std::string& label, const RankCost& c, double total_s, double unit, bool disk) {
    return fmt::format("{:>8} | {:>10.2f} | {:>9.3f} | {}{:>9.3f} | {:>9.3f} | {:>9.3f}", label,
                       static_cast<double>(c.memory_bytes) / unit, c.lookup_s * 1e3,
                       disk ? fmt::format("{:>9.3f} | ", (c.disk_s + c.prefetch_s) * 1e3) : "",
                       c.comm_s * 1e3, c.dense_s * 1e3, total_s * 1e3);
}

std::string rank_row(const std::string& label, const RankCost& c, double unit, bool disk) {
    return rank_row(label, c, c.total_s(), unit, disk);
}

// An order statistic of each column, the total's included: each column sorted on its own, so
// the row is not one rank and its columns do not add up.
std::string stat_row(const std::string& label,
                     const std::vector<RankCost>& ranks,
                     double quantile,
                     double unit,
                     bool disk) {
    const auto pick = [&](auto get) {
        std::vector<double> v;
        v.reserve(ranks.size());
        for (const RankCost& r : ranks) {
            v.push_back(get(r));
        }
        std::sort(v.begin(), v.end());
        return v[static_cast<size_t>(quantile * static_cast<double>(v.size() - 1) + 0.5)];
    };
    RankCost c;
    c.memory_bytes =
        static_cast<int64_t>(pick([](const RankCost& r) { return double(r.memory_bytes); }));
    c.lookup_s = pick([](const RankCost& r) { return r.lookup_s; });
    c.disk_s = pick([](const RankCost& r) { return r.disk_s + r.prefetch_s; });
    c.comm_s = pick([](const RankCost& r) { return r.comm_s; });
    c.dense_s = pick([](const RankCost& r) { return r.dense_s; });
    return rank_row(label, c, pick([](const RankCost& r) { return r.total_s(); }), unit, disk);
}

std::vector<std::string> rank_rows(const PlanEstimate& estimate,
                                   size_t max_rank_rows,
                                   double unit,
                                   bool disk) {
    const auto& ranks = estimate.ranks;
    std::vector<std::string> rows;
    if (ranks.size() <= max_rank_rows) {
        for (size_t r = 0; r < ranks.size(); ++r) {
            rows.push_back(rank_row(std::to_string(r), ranks[r], unit, disk));
        }
        return rows;
    }
    std::vector<size_t> order(ranks.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ranks[a].total_s() > ranks[b].total_s(); });
    for (size_t i = 0; i < 3; ++i) {
        rows.push_back(rank_row(std::to_string(order[i]), ranks[order[i]], unit, disk));
    }
    rows.push_back(fmt::format("{:>8} | ({} ranks between)", "...", ranks.size() - 4));
    rows.push_back(rank_row(std::to_string(order.back()), ranks[order.back()], unit, disk));
    rows.push_back(stat_row("min", ranks, 0.0, unit, disk));
    rows.push_back(stat_row("median", ranks, 0.5, unit, disk));
    rows.push_back(stat_row("max", ranks, 1.0, unit, disk));
    return rows;
}

std::string bytes_text(double bytes) {
    return bytes < kGiB ? fmt::format("{:.1f} MiB", bytes / kMiB)
                        : fmt::format("{:.2f} GiB", bytes / kGiB);
}

// Each rank's bytes in each tier against its budget ("-": not checked): the compute tier, DDR
// beside HBM on cuda, the disk. Ranks beyond max_rank_rows: the fullest in each column.
std::string tier_report(const PlanEstimate& estimate,
                        const Topology& topology,
                        size_t max_rank_rows) {
    const bool cuda = topology.compute_device == "cuda";
    const auto budget = [](int64_t limit) {
        return limit > 0 ? bytes_text(static_cast<double>(limit)) : std::string("-");
    };
    const auto row = [&](const std::string& label, const RankCost& c) {
        return fmt::format("{:>8} | {:>12} | {}{:>12}\n", label,
                           bytes_text(static_cast<double>(c.memory_bytes)),
                           cuda ? fmt::format("{:>12} | ", bytes_text(double(c.host_bytes))) : "",
                           bytes_text(static_cast<double>(c.disk_bytes)));
    };
    std::string out =
        fmt::format("\nstorage per rank: {} (budget {}){}, disk (budget {}{})\n",
                    topology.memory_kind(), budget(estimate.memory_limit_bytes),
                    cuda ? fmt::format(", DDR for fused_uvm(_caching) rows (budget {})",
                                       budget(estimate.host_limit_bytes))
                         : "",
                    budget(estimate.disk_limit_bytes),
                    estimate.disk_limit_bytes > 0 ? "" : ": disk_gib not given, not checked");
    out += fmt::format("{:>8} | {:>12} | {}{:>12}\n", "rank", topology.memory_kind(),
                       cuda ? fmt::format("{:>12} | ", "DDR") : "", "disk");
    out += fmt::format("{:->8} | {:->12} | {}{:->12}\n", "", "", cuda ? "------------ | " : "", "");
    const auto& ranks = estimate.ranks;
    if (ranks.size() <= max_rank_rows) {
        for (size_t r = 0; r < ranks.size(); ++r)
            out += row(std::to_string(r), ranks[r]);
        return out;
    }
    RankCost most;
    most.memory_bytes = estimate.max_memory_bytes();
    most.host_bytes = estimate.max_host_bytes();
    most.disk_bytes = estimate.max_disk_bytes();
    return out + row("max", most);
}

}  // namespace

std::string estimate_report(const PlanEstimate& estimate,
                            const Config& config,
                            const Topology& topology,
                            size_t max_rank_rows) {
    const int w = topology.world_size;
    std::string out = fmt::format(
        "topology: {} rank{} ({} node{} of {}), {}; {} limit {:.1f} GiB per rank; memory {} GB/s, "
        "intra-node {} GB/s, cross-node {} GB/s, dense {} GFLOP/s\n",
        w, w == 1 ? "" : "s", topology.num_nodes(), topology.num_nodes() == 1 ? "" : "s",
        topology.local_size, topology.compute_device, topology.memory_kind(),
        static_cast<double>(estimate.memory_limit_bytes) / kGiB, topology.device_memory_bw_gbps,
        topology.intra_node_bw_gbps, topology.cross_node_bw_gbps, topology.device_gflops);
    out += fmt::format("batch: {} per rank, {} global; sparse optimizer {}\n\n",
                       config.data.batch_size, config.data.batch_size * w,
                       config.optimizer.sparse.type);
    const bool small = estimate.max_memory_bytes() < static_cast<int64_t>(kGiB);
    const double unit = small ? kMiB : kGiB;
    bool disk = false;  // a cached table's misses
    for (const RankCost& r : estimate.ranks)
        disk = disk || r.disk_s > 0 || r.prefetch_s > 0;
    out += fmt::format("{:>8} | {:>10} | {:>9} | {}{:>9} | {:>9} | {:>9}\n", "rank",
                       small ? "memory MiB" : "memory GiB", "lookup ms",
                       disk ? fmt::format("{:>9} | ", "miss ms") : "", "comm ms", "dense ms",
                       "total ms");
    out += fmt::format("{:->8} | {:->10} | {:->9} | {}{:->9} | {:->9} | {:->9}\n", "", "", "",
                       disk ? "--------- | " : "", "", "", "");
    for (const std::string& row : rank_rows(estimate, max_rank_rows, unit, disk)) {
        out += row + "\n";
    }
    const auto slowest =
        static_cast<size_t>(std::max_element(estimate.ranks.begin(), estimate.ranks.end(),
                                             [](const RankCost& a, const RankCost& b) {
                                                 return a.total_s() < b.total_s();
                                             }) -
                            estimate.ranks.begin());
    const RankCost& s = estimate.ranks[slowest];
    const double step = estimate.step_time_s();
    // The misses' share: rows read and written back (disk, page cache ignored, or the host
    // link); with the prefetch pipeline beside the rest of the step.
    const std::string misses =
        !disk ? ""
        : s.prefetch_s > 0
            ? fmt::format("cache misses {:.3f} beside the step (prefetch_pipeline) | ",
                          s.prefetch_s * 1e3)
            : fmt::format("cache misses {:.3f} | ", s.disk_s * 1e3);
    out += fmt::format(
        "\npredicted step: {:.3f} ms (slowest rank {}: lookup {:.3f} | {}comm {:.3f} | dense "
        "{:.3f} ms), {:.0f} samples/s; peak memory {:.2f} {} of {:.1f} GiB per rank\n",
        step * 1e3, slowest, s.lookup_s * 1e3, misses, s.comm_s * 1e3, s.dense_s * 1e3,
        step > 0 ? static_cast<double>(config.data.batch_size) * w / step : 0.0,
        static_cast<double>(estimate.max_memory_bytes()) / unit, small ? "MiB" : "GiB",
        static_cast<double>(estimate.memory_limit_bytes) / kGiB);
    if (disk || estimate.max_host_bytes() > 0)
        out += tier_report(estimate, topology, max_rank_rows);
    return out;
}

double predicted_hit_rate(int64_t rows, int64_t slots, double alpha, double ids) {
    const CacheUse use = predicted_cache_use(rows, slots, alpha, ids);
    return use.distinct > 0 ? use.hits / use.distinct : 1.0;
}

std::string cache_report(const ShardingPlan& plan,
                         const Config& config,
                         const std::map<std::string, double>& measured,
                         const CacheStatistics* stats) {
    int64_t sampled = 0;  // global batches behind the measured statistics
    std::string rows;
    const int64_t global_batch = config.data.batch_size * plan.env.world_size;
    const double state_element = CostModel::state_bytes_per_element(config.optimizer.sparse.type);
    for (const ModelConfig::Table& t : config.model.tables) {
        const ParameterSharding& ps = plan.at(t.name);
        if (!ps.cache_params)
            continue;
        int64_t slots = 0;  // the shards' caches together (CachedEmbeddingShard's sizing)
        for (const ShardMetadata& s : ps.sharding_spec) {
            const auto wanted = static_cast<int64_t>(
                std::ceil(ps.cache_params->load_factor *
                          static_cast<double>(std::max<int64_t>(s.shard_sizes[0], 1))));
            slots += std::max<int64_t>(wanted, 1);
        }
        const double row_bytes =
            static_cast<double>(t.embedding_dim) *
                (static_cast<double>(dtype_size(dtype_from_name(t.data_type))) + state_element) +
            CostModel::state_bytes_per_row(config.optimizer.sparse.type);
        // A stored record: the row, its state, a CRC-32 and a magic word, 8-byte aligned.
        const double record = std::ceil((row_bytes + 8.0) / 8.0) * 8.0;
        double ids = static_cast<double>(global_batch) * t.pooling_factor *
                     static_cast<double>(t.feature_names.size());
        std::string predicted = "-";
        const TableIdStatistics* measured_ids = find_statistics(stats, t.name);
        if (config.data.type == "synthetic") {
            predicted = fmt::format(
                "{:.4f}",
                predicted_hit_rate(t.num_embeddings, slots, config.data.synthetic.zipf_alpha, ids));
        } else if (measured_ids != nullptr) {
            const TableIdStatistics& s = *measured_ids;
            predicted = fmt::format("{:.4f}", slots >= t.num_embeddings ? 1.0 : s.hit_rate(slots));
            sampled = s.batches();
            ids = s.ids_per_batch();
        }
        const auto m = measured.find(t.name);
        rows += fmt::format(
            "{:>10} | {:>11} | {:>11} | {:>9.1f} | {:>8.2f} | {:>9.0f} | {:>9} | {:>8}\n", t.name,
            t.num_embeddings, slots, static_cast<double>(slots) * row_bytes / kMiB,
            static_cast<double>(t.num_embeddings) * record / kGiB, ids, predicted,
            m == measured.end() ? "-" : fmt::format("{:.4f}", m->second));
    }
    if (rows.empty())
        return "";
    return fmt::format(
               "\ncached tables (key_value: the cache in DRAM, the rows on disk; "
               "fused_uvm_caching: "
               "the cache in HBM, the rows in DDR; rows GiB: all of them once written), a global "
               "batch's ids; hit rate = distinct rows of a batch found in the cache, predicted for "
               "an ideal cache on the {} data{}, measured by a run\n"
               "{:>10} | {:>11} | {:>11} | {:>9} | {:>8} | {:>9} | {:>9} | {:>8}\n"
               "{:->10} | {:->11} | {:->11} | {:->9} | {:->8} | {:->9} | {:->9} | {:->8}\n",
               config.data.type,
               sampled > 0 ? fmt::format(" (its first {} global batches)", sampled) : "", "table",
               "rows", "cache slots", "cache MiB", "rows GiB", "ids/batch", "predicted", "measured",
               "", "", "", "", "", "", "", "") +
           rows;
}

std::string managed_collision_report(const ShardingPlan& plan, const Config& config) {
    std::string rows;
    for (const ModelConfig::Table& t : config.model.tables) {
        const ModelConfig::Table::ManagedCollision& mc = t.managed_collision;
        if (mc.zch_size == 0)
            continue;
        const std::vector<int> owners = bucket_owners(&plan.at(t.name), t);
        const auto k = static_cast<int64_t>(owners.size());
        std::map<int, std::vector<int64_t>> owned;  // rank -> its buckets
        for (int64_t b = 0; b < k; ++b)
            owned[owners[static_cast<size_t>(b)]].push_back(b);
        std::vector<std::string> ranks;
        size_t most = 0;
        for (const auto& [rank, buckets] : owned) {
            most = std::max(most, buckets.size());
            ranks.push_back(buckets.size() == 1
                                ? fmt::format("{}: bucket {}", rank, buckets[0])
                                : fmt::format("{}: {} buckets ({}-{})", rank, buckets.size(),
                                              buckets.front(), buckets.back()));
        }
        const double bytes =
            static_cast<double>(most) *
            static_cast<double>(MCHManagedCollisionModule::slot_bytes(mc.zch_size / k));
        rows += fmt::format("{:>10} | {:>7} | {:>11} | {:>12.2f} | {}\n", t.name, k,
                            mc.zch_size / k, bytes / kMiB, fmt::join(ranks, ", "));
    }
    if (rows.empty())
        return "";
    return fmt::format(
               "\nmanaged-collision tables (each bucket's remap state in host memory on the rank "
               "holding its first row)\n"
               "{:>10} | {:>7} | {:>11} | {:>12} | {}\n{:->10} | {:->7} | {:->11} | {:->12} | "
               "{:->5}\n",
               "table", "buckets", "slots each", "MiB, a rank", "ranks", "", "", "", "", "") +
           rows;
}

}  // namespace shardrec
