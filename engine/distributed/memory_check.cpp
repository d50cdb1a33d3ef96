#include "engine/distributed/memory_check.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/core/error.h"
#include "engine/distributed/planner.h"
#include "engine/distributed/planner_estimate.h"
#include "engine/distributed/topology.h"
#include "engine/modules/managed_collision.h"

namespace shardrec {
namespace {

constexpr double kGiB = 1073741824.0;
constexpr size_t kLargestTablesShown = 3;

Topology run_topology(const Config& config, int world_size, int local_size) {
    Topology topology =
        resolve_topology(config.sharding.topology, config.runtime.device, world_size);
    topology.local_size = std::min(local_size, world_size);
    return topology;
}

void add_table(RankMemory& r, const std::string& name, double bytes) {
    r.tables_bytes += bytes;
    for (TableBytes& t : r.tables) {
        if (t.name == name) {
            t.bytes += bytes;
            return;
        }
    }
    r.tables.push_back({name, bytes});
}

// One table's option: its storage goes to the tables, the rest of its shards' memory and what
// every rank holds (pooled rows received) to the buffers.
void add_cost(std::vector<RankMemory>& ranks,
              const CostModel& model,
              const ModelConfig::Table& table,
              const OptionCost& cost,
              const std::vector<int>& shard_ranks,
              const std::vector<std::array<int64_t, 2>>& shard_sizes,
              EmbeddingComputeKernel kernel) {
    for (RankMemory& r : ranks) {
        r.buffers_bytes += static_cast<double>(cost.every_rank.memory_bytes);
    }
    for (size_t i = 0; i < cost.shards.size(); ++i) {
        RankMemory& r = ranks[static_cast<size_t>(shard_ranks[i])];
        // fused_uvm rows live in host memory (RankCost::host_bytes), not on the device.
        const double storage =
            kernel == EmbeddingComputeKernel::kFusedUvm
                ? 0.0
                : model.shard_storage_bytes(table, kernel, shard_sizes[i][0], shard_sizes[i][1]);
        add_table(r, table.name, storage);
        r.buffers_bytes +=
            std::max(0.0, static_cast<double>(cost.shards[i].memory_bytes) - storage);
    }
}

}  // namespace

std::vector<RankMemory> plan_rank_memory(const Config& config, int world_size, int local_size) {
    const Topology topology = run_topology(config, world_size, local_size);
    const CostModel model(config, topology);
    std::vector<RankMemory> ranks(static_cast<size_t>(world_size));
    for (RankMemory& r : ranks) {
        r.dense_bytes = static_cast<double>(model.dense_cost().memory_bytes);
    }
    // One process without a plan file: every table whole, with its fused update (key_value: its
    // cache). A plan file is checked and costed at any world size.
    const bool planned = world_size > 1 || !config.sharding.plan_file.empty();
    if (!planned) {
        for (const ModelConfig::Table& table : config.model.tables) {
            const std::vector<std::array<int64_t, 2>> whole{
                {table.num_embeddings, table.embedding_dim}};
            const auto named = parse_compute_kernel(config.sharding.kernel_of(table.name));
            const auto kernel = named && *named != EmbeddingComputeKernel::kDense
                                    ? *named
                                    : EmbeddingComputeKernel::kFused;
            add_cost(ranks, model, table,
                     model.table_cost(table, ShardingType::kTableWise, kernel, whole), {0}, whole,
                     kernel);
        }
    }
    const ShardingPlan plan = planned ? make_sharding_plan(config, topology) : ShardingPlan{};
    if (planned) {
        for (const ModelConfig::Table& table : config.model.tables) {
            const ParameterSharding& ps = plan.at(table.name);
            std::vector<int> shard_ranks;
            std::vector<std::array<int64_t, 2>> sizes;
            if (ps.sharding_type == ShardingType::kDataParallel) {
                for (int r = 0; r < world_size; ++r) {
                    shard_ranks.push_back(r);
                    sizes.push_back({table.num_embeddings, table.embedding_dim});
                }
            } else {
                for (const ShardMetadata& s : ps.sharding_spec) {
                    shard_ranks.push_back(s.rank);
                    sizes.push_back(s.shard_sizes);
                }
            }
            add_cost(ranks, model, table, model.table_cost(table, ps), shard_ranks, sizes,
                     ps.compute_kernel);
        }
    }
    // The managed-collision buckets' slot maps, on their owners (the remap runs on the host:
    // counted where the host's memory is checked, on the CPU).
    for (const ModelConfig::Table& table : config.model.tables) {
        const ModelConfig::Table::ManagedCollision& mc = table.managed_collision;
        if (mc.zch_size == 0 || config.runtime.device != "cpu")
            continue;
        const std::vector<int> owners =
            bucket_owners(planned ? &plan.at(table.name) : nullptr, table);
        const auto k = static_cast<int64_t>(owners.size());
        for (const int owner : owners)
            ranks[static_cast<size_t>(owner)].remap_bytes +=
                static_cast<double>(MCHManagedCollisionModule::slot_bytes(mc.zch_size / k));
    }
    for (RankMemory& r : ranks) {
        std::stable_sort(
            r.tables.begin(), r.tables.end(),
            [](const TableBytes& a, const TableBytes& b) { return a.bytes > b.bytes; });
    }
    return ranks;
}

std::string memory_problem(const std::vector<RankMemory>& ranks,
                           int rank,
                           int local_size,
                           const AvailableMemory& shared,
                           const AvailableMemory& own,
                           int64_t batch_size) {
    const auto world = static_cast<int>(ranks.size());
    const RankMemory& me = ranks[static_cast<size_t>(rank)];
    const double need = me.total_bytes();
    local_size = std::clamp(local_size, 1, world);
    double others = 0;
    int mates = 0;
    const int first = rank / local_size * local_size;
    for (int r = first; r < std::min(world, first + local_size); ++r) {
        if (r != rank) {
            others += ranks[static_cast<size_t>(r)].total_bytes();
            ++mates;
        }
    }
    double available = -1;
    std::string bound;
    if (own.bytes >= 0) {
        available = static_cast<double>(own.bytes);
        bound = own.bound_by;
    }
    if (shared.bytes >= 0) {
        const double left = std::max(0.0, static_cast<double>(shared.bytes) - others);
        if (available < 0 || left < available) {
            available = left;
            bound = mates == 0
                        ? shared.bound_by
                        : fmt::format(
                              "{} of {}, less {} for the other {} rank{} on "
                              "this node",
                              format_bytes(static_cast<double>(shared.bytes)), shared.bound_by,
                              format_bytes(others), mates, mates == 1 ? "" : "s");
        }
    }
    if (available < 0 || need <= available) {
        return "";
    }
    std::vector<std::string> largest;
    for (size_t i = 0; i < std::min(kLargestTablesShown, me.tables.size()); ++i) {
        largest.push_back(
            fmt::format("'{}' {}", me.tables[i].name, format_bytes(me.tables[i].bytes)));
    }
    return fmt::format(
        "rank {} needs {} but only {} is available to it ({}): embedding tables {} (largest: {}), "
        "communication buffers {}, dense layers and activations (batch size {}) {}{}; use more "
        "ranks, smaller tables, a smaller data.batch_size or a sparse optimizer with less state "
        "(rowwise_adagrad)",
        rank, format_bytes(need), format_bytes(available), bound, format_bytes(me.tables_bytes),
        largest.empty() ? std::string("none") : fmt::format("{}", fmt::join(largest, ", ")),
        format_bytes(me.buffers_bytes), batch_size, format_bytes(me.dense_bytes),
        me.remap_bytes > 0 ? fmt::format(", managed-collision slot maps {} (more "
                                         "managed_collision.total_num_buckets spread them)",
                                         format_bytes(me.remap_bytes))
                           : std::string());
}

void check_memory_fits(
    const Config& config, int world_size, int local_size, int rank, Device device) {
    // sharding.replica_groups: every group holds the plan of one group (rank r as rank r % G).
    const int G = sharding_group_size(config.sharding, world_size, local_size);
    std::vector<RankMemory> ranks = plan_rank_memory(config, G, std::min(local_size, G));
    for (int r = G; r < world_size; ++r) {
        ranks.push_back(ranks[static_cast<size_t>(r % G)]);
        ranks.back().remap_bytes = 0;  // the buckets live in the first group
    }
    AvailableMemory shared, own;
    if (device.is_cuda()) {
        // One rank per GPU: nothing is shared with the node's other ranks.
        local_size = 1;
        if (device.index < cuda::device_count()) {
            own.bytes = static_cast<int64_t>(cuda::free_bytes(device.index));
            own.bound_by = fmt::format("free memory of cuda:{}", device.index);
        } else {
            const Topology topology = run_topology(config, world_size, local_size);
            own.bytes = static_cast<int64_t>(topology.device_memory_gib * kGiB);
            own.bound_by = "the topology's HBM per GPU; no GPU is visible here";
        }
    } else {
        MemoryLimits limits = read_memory_limits();
        MemoryLimits process;  // RLIMIT_AS holds for this process alone
        process.address_space_limit = limits.address_space_limit;
        process.address_space_used = limits.address_space_used;
        limits.address_space_limit = -1;
        shared = available_memory(limits);
        own = available_memory(process);
    }
    const std::string problem =
        memory_problem(ranks, rank, local_size, shared, own, config.data.batch_size);
    if (!problem.empty()) {
        throw Error(fmt::format("{}: {}", error_context(), problem));
    }
}

}  // namespace shardrec
