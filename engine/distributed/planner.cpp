// The greedy partitioner over the cost model's options (see planner.h for the algorithm).
#include "engine/distributed/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "engine/core/error.h"
#include "engine/core/log.h"

namespace shardrec {

namespace {

constexpr double kGiB = 1073741824.0;

// One way to shard one table: the sharding with placeholder ranks (shard i on rank i) and its cost.
struct Option {
    ParameterSharding sharding;
    OptionCost cost;
    bool pinned = false;  // the ranks are fixed by the config
};

struct TableOptions {
    const ModelConfig::Table* table = nullptr;
    const ShardingConfig::Table* entry = nullptr;
    std::vector<Option> options;
    double share = 0;  // dominant share, for the order
};

// Per-rank load while partitioning: time and each tier's bytes (topology.h).
struct Loads {
    std::vector<double> time;
    std::vector<int64_t> memory, host, disk;
    int64_t limit = 0;
    int64_t host_limit = 0, disk_limit = 0;  // 0: not checked (host: cpu, DDR is `memory`)
    // The fallback pass when memory is tight: balance memory first, time second.
    bool memory_first = false;

    bool fits(int rank, const RankCost& add) const {
        const auto r = static_cast<size_t>(rank);
        return memory[r] + add.memory_bytes <= limit &&
               (host_limit == 0 || host[r] + add.host_bytes <= host_limit) &&
               (disk_limit == 0 || disk[r] + add.disk_bytes <= disk_limit);
    }
};

RankCost plus(RankCost a, const RankCost& b) {
    a += b;
    return a;
}

std::vector<int> to_int(const std::vector<int64_t>& v) {
    return std::vector<int>(v.begin(), v.end());
}

Option make_option(const ModelConfig::Table& t,
                   ShardingType type,
                   EmbeddingComputeKernel kernel,
                   const std::vector<int>& ranks,
                   const std::vector<int64_t>& widths,
                   const PlacementEnv& env,
                   const CostModel& model) {
    Option o;
    o.sharding = make_parameter_sharding(type, kernel, t.num_embeddings, t.embedding_dim, ranks,
                                         widths, env);
    o.cost = model.table_cost(t, o.sharding);
    return o;
}

// column_wise options: the config's widths (on distinct ranks), else even splits into k = 2, 4,
// ... shards of at least kMinColumnWidth columns, a multiple of 4; when the config asks for
// column_wise and no such split exists, any even split into up to min(W, D) shards.
void add_column_wise(const ModelConfig::Table& t,
                     const std::vector<int64_t>& fixed,
                     bool forced,
                     EmbeddingComputeKernel kernel,
                     const PlacementEnv& env,
                     const CostModel& model,
                     std::vector<Option>& out) {
    const auto first_ranks = [](int64_t k) {
        std::vector<int> ranks(static_cast<size_t>(k));
        std::iota(ranks.begin(), ranks.end(), 0);
        return ranks;
    };
    const int64_t w = env.world_size;
    const int64_t d = t.embedding_dim;
    if (!fixed.empty()) {
        if (static_cast<int64_t>(fixed.size()) <= w) {
            const auto k = static_cast<int64_t>(fixed.size());
            out.push_back(make_option(t, ShardingType::kColumnWise, kernel, first_ranks(k), fixed,
                                      env, model));
        }
        return;
    }
    const size_t before = out.size();
    for (int64_t k = 2; k <= w && d % k == 0 && d / k >= kMinColumnWidth && (d / k) % 4 == 0;
         k *= 2) {
        out.push_back(
            make_option(t, ShardingType::kColumnWise, kernel, first_ranks(k), {}, env, model));
    }
    if (forced && out.size() == before) {
        out.push_back(make_option(t, ShardingType::kColumnWise, kernel, first_ranks(std::min(w, d)),
                                  {}, env, model));
    }
}

// The options of one table (planner.h step 1).
std::vector<Option> enumerate_options(const ModelConfig::Table& t,
                                      const ShardingConfig::Table* entry,
                                      const ShardingConfig& section,
                                      const PlacementEnv& env,
                                      const CostModel& model) {
    const int w = env.world_size;
    const int l = env.local_size;
    const std::string want = entry ? entry->sharding_type : "";
    // The dense kernel is data_parallel's (TorchRec's planner pairs them too): asking for it
    // narrows the table to data_parallel, as a sharding_type would.
    const std::string kernel_name = entry ? entry->compute_kernel : section.compute_kernel;
    const bool dense = kernel_name == "dense";
    // key_value: the table is sharded (never data_parallel) and
    // keeps that kernel.
    const auto requested = parse_compute_kernel(kernel_name);
    const bool tiered = requested && !dense && *requested != EmbeddingComputeKernel::kFused;
    const auto allowed = [&](ShardingType type) {
        return (want.empty() || parse_sharding_type(want) == type) &&
               (!dense || type == ShardingType::kDataParallel) &&
               (!tiered || type != ShardingType::kDataParallel);
    };
    // One kernel per type (ShardingConfig::resolve refuses dense on any other type), so no
    // option is costed with a kernel the run would not train with.
    const auto kernel_for = [&](ShardingType type) {
        return type == ShardingType::kDataParallel ? EmbeddingComputeKernel::kDense
               : tiered                            ? *requested
                                                   : EmbeddingComputeKernel::kFused;
    };
    std::vector<Option> out;
    if (entry && !entry->ranks.empty()) {
        const ShardingType type = *parse_sharding_type(want);
        const std::vector<int> ranks = expand_ranks(type, to_int(entry->ranks), env);
        const std::string problem =
            sharding_problem(type, kernel_for(type), t.num_embeddings, t.embedding_dim, ranks,
                             entry->column_widths, env);
        SR_CHECK(problem.empty(), "{}: sharding.tables entry for '{}': {}", entry->location, t.name,
                 problem);
        out.push_back(
            make_option(t, type, kernel_for(type), ranks, entry->column_widths, env, model));
        out.back().pinned = true;
        return out;
    }
    // Degenerate options (row_wise on one rank, table_row_wise over the whole world) only when
    // the config asks for that type.
    const bool forced = !want.empty() || dense;
    if (allowed(ShardingType::kTableWise)) {
        out.push_back(make_option(t, ShardingType::kTableWise, kernel_for(ShardingType::kTableWise),
                                  {0}, {}, env, model));
    }
    if ((w > 1 || forced) && allowed(ShardingType::kRowWise)) {
        out.push_back(make_option(t, ShardingType::kRowWise, kernel_for(ShardingType::kRowWise),
                                  all_ranks(w), {}, env, model));
    }
    if (((l > 1 && w > l) || forced) && allowed(ShardingType::kTableRowWise)) {
        out.push_back(make_option(t, ShardingType::kTableRowWise,
                                  kernel_for(ShardingType::kTableRowWise), node_ranks(0, l), {},
                                  env, model));
    }
    if (allowed(ShardingType::kColumnWise)) {
        const std::vector<int64_t> fixed = entry ? entry->column_widths : std::vector<int64_t>{};
        add_column_wise(t, fixed, forced, kernel_for(ShardingType::kColumnWise), env, model, out);
    }
    if ((w > 1 || forced) && allowed(ShardingType::kDataParallel)) {
        out.push_back(make_option(t, ShardingType::kDataParallel, EmbeddingComputeKernel::kDense,
                                  all_ranks(w), {}, env, model));
    }
    if (out.empty()) {
        throw Error(fmt::format("{}: {}: table '{}' [{}, {}] as {} has no layout on {} rank{}",
                                error_context(), entry ? entry->location : "sharding", t.name,
                                t.num_embeddings, t.embedding_dim, want, w, w == 1 ? "" : "s"));
    }
    return out;
}

struct Placement {
    bool ok = false;
    std::vector<int> ranks;   // rank of each shard
    double makespan = 0;      // the slowest rank's time after placing
    double work = 0;          // total time the option adds
    double score = 0;         // lower bound of the final slowest-rank time (see choose_option)
    int64_t peak_memory = 0;  // the fullest rank's memory after placing
};

// Ranks by time, then memory, then id: where the next shard goes first.
std::vector<int> ranks_by_load(const Loads& loads) {
    std::vector<int> order(loads.time.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
        if (loads.memory_first && loads.memory[ua] != loads.memory[ub]) {
            return loads.memory[ua] < loads.memory[ub];
        }
        if (loads.time[ua] != loads.time[ub]) {
            return loads.time[ua] < loads.time[ub];
        }
        return loads.memory[ua] != loads.memory[ub] ? loads.memory[ua] < loads.memory[ub] : a < b;
    });
    return order;
}

// The ranks each shard of `o` would take now (planner.h step 3), before checking the result.
std::vector<int> choose_ranks(const Option& o, const Loads& loads, const PlacementEnv& env) {
    const ShardingType type = o.sharding.sharding_type;
    const RankCost& every = o.cost.every_rank;
    if (o.pinned || type == ShardingType::kRowWise || type == ShardingType::kDataParallel) {
        return o.sharding.ranks;
    }
    if (type == ShardingType::kTableRowWise) {
        int best = -1;
        double best_time = 0;
        for (int n = 0; n < env.num_nodes(); ++n) {
            double t = 0;
            bool fit = true;
            for (int i = 0; i < env.local_size; ++i) {
                const int r = n * env.local_size + i;
                const auto& shard = o.cost.shards[static_cast<size_t>(i)];
                const auto m = static_cast<double>(loads.memory[static_cast<size_t>(r)]);
                t = std::max(t, loads.memory_first
                                    ? m
                                    : loads.time[static_cast<size_t>(r)] + shard.total_s());
                fit = fit && loads.fits(r, plus(shard, every));
            }
            if (fit && (best < 0 || t < best_time)) {
                best = n;
                best_time = t;
            }
        }
        return best < 0 ? std::vector<int>{} : node_ranks(best, env.local_size);
    }
    // table_wise and column_wise: each shard on the least-loaded rank with room, distinct ranks.
    std::vector<int> ranks;
    const std::vector<int> order = ranks_by_load(loads);
    size_t next = 0;
    for (const RankCost& shard : o.cost.shards) {
        while (next < order.size() && !loads.fits(order[next], plus(shard, every))) {
            ++next;
        }
        if (next == order.size()) {
            return {};
        }
        ranks.push_back(order[next++]);
    }
    return ranks;
}

void add_load(const RankCost& c, size_t r, Loads& loads) {
    loads.time[r] += c.total_s();
    loads.memory[r] += c.memory_bytes;
    loads.host[r] += c.host_bytes;
    loads.disk[r] += c.disk_bytes;
}

void commit(const Option& o, const Placement& p, Loads& loads) {
    for (size_t r = 0; r < loads.time.size(); ++r)
        add_load(o.cost.every_rank, r, loads);
    for (size_t i = 0; i < p.ranks.size(); ++i)
        add_load(o.cost.shards[i], static_cast<size_t>(p.ranks[i]), loads);
}

// `remaining`: the least work the tables still to place will add.
Placement place(const Option& o, const Loads& loads, const PlacementEnv& env, double remaining) {
    Placement p;
    p.ranks = choose_ranks(o, loads, env);
    if (p.ranks.size() != o.cost.shards.size()) {
        return p;
    }
    Loads after = loads;
    commit(o, p, after);
    const std::vector<double>& time = after.time;
    p.peak_memory = *std::max_element(after.memory.begin(), after.memory.end());
    p.ok = p.peak_memory <= loads.limit;
    for (size_t r = 0; r < time.size(); ++r) {
        p.ok = p.ok && (loads.host_limit == 0 || after.host[r] <= loads.host_limit) &&
               (loads.disk_limit == 0 || after.disk[r] <= loads.disk_limit);
    }
    p.makespan = *std::max_element(time.begin(), time.end());
    p.work = o.cost.total_s(env.world_size);
    const double all = std::accumulate(time.begin(), time.end(), 0.0) + remaining;
    p.score = std::max(p.makespan, all / static_cast<double>(env.world_size));
    return p;
}

std::string gib(int64_t bytes) {
    const auto b = static_cast<double>(bytes);
    return b < kGiB ? fmt::format("{:.1f} MiB", b / 1048576.0)
                    : fmt::format("{:.1f} GiB", b / kGiB);
}

// Most of each tier one rank needs for the option: its largest shard plus what every rank holds.
RankCost peak_shard(const Option& o) {
    RankCost m;
    for (const RankCost& s : o.cost.shards) {
        m.memory_bytes = std::max(m.memory_bytes, s.memory_bytes);
        m.host_bytes = std::max(m.host_bytes, s.host_bytes);
        m.disk_bytes = std::max(m.disk_bytes, s.disk_bytes);
    }
    return plus(m, o.cost.every_rank);
}

int64_t total_memory(const Option& o, int world_size) {
    int64_t m = o.cost.every_rank.memory_bytes * world_size;
    for (const RankCost& s : o.cost.shards) {
        m += s.memory_bytes;
    }
    return m;
}

// The most free bytes of a tier on any rank, "X of the Y limit per rank", and that rank.
std::string most_free(const std::vector<int64_t>& used, int64_t limit) {
    const auto least = std::min_element(used.begin(), used.end());
    return fmt::format("{} of the {} limit per rank (rank {})", gib(limit - *least), gib(limit),
                       least - used.begin());
}

[[noreturn]] void fail_to_place(const TableOptions& t, const Loads& loads, const Topology& topo) {
    std::vector<std::string> needs;
    bool host = false, disk = false;
    for (const Option& o : t.options) {
        const RankCost peak = peak_shard(o);
        std::string tiers;
        if (peak.host_bytes > 0) {
            tiers += fmt::format(" and {} of DDR", gib(peak.host_bytes));
            host = true;
        }
        if (peak.disk_bytes > 0) {
            tiers += fmt::format(" and {} of disk", gib(peak.disk_bytes));
            disk = true;
        }
        needs.push_back(fmt::format("{} ({} shard{}) needs {}{} on a rank",
                                    sharding_type_name(o.sharding.sharding_type),
                                    o.cost.shards.size(), o.cost.shards.size() == 1 ? "" : "s",
                                    gib(peak.memory_bytes), tiers));
    }
    const int64_t least = *std::min_element(loads.memory.begin(), loads.memory.end());
    std::string free = fmt::format("the most free {} on any rank is {} of the {} limit per rank",
                                   topo.memory_kind(), gib(loads.limit - least), gib(loads.limit));
    if (host && loads.host_limit > 0)
        free += "; the most free DDR is " + most_free(loads.host, loads.host_limit);
    if (disk && loads.disk_limit > 0)
        free += "; the most free disk (disk_gib) is " + most_free(loads.disk, loads.disk_limit);
    throw Error(fmt::format(
        "{}: cannot place table '{}' [{}, {}] on {} rank{}: {}; {}. Use more ranks, a topology "
        "with more memory{}, smaller tables or an optimizer with less state (rowwise_adagrad)",
        error_context(), t.table->name, t.table->num_embeddings, t.table->embedding_dim,
        topo.world_size, topo.world_size == 1 ? "" : "s", fmt::join(needs, ", "), free,
        disk ? " or disk" : ""));
}

// Even a perfect packing cannot fit: say so with the totals and the biggest tables.
void check_total_memory(const std::vector<TableOptions>& tables,
                        const RankCost& dense,
                        const Topology& topo) {
    const int w = topo.world_size;
    int64_t need = dense.memory_bytes * w;
    std::vector<std::pair<int64_t, std::string>> per_table;
    for (const TableOptions& t : tables) {
        int64_t least = std::numeric_limits<int64_t>::max();
        for (const Option& o : t.options) {
            least = std::min(least, total_memory(o, w));
        }
        need += least;
        per_table.emplace_back(least, t.table->name);
    }
    const int64_t have = topo.memory_limit_bytes() * w;
    if (need <= have) {
        return;
    }
    std::sort(per_table.rbegin(), per_table.rend());
    std::vector<std::string> biggest;
    for (size_t i = 0; i < std::min<size_t>(4, per_table.size()); ++i) {
        biggest.push_back(fmt::format("{} {}", per_table[i].second, gib(per_table[i].first)));
    }
    throw Error(fmt::format(
        "{}: the model does not fit: its tables and dense part need at least {} in total (largest: "
        "{}), the {} rank{} {} {} x {} = {} of {} to plan with ({} GiB a rank less "
        "reserved_fraction {})",
        error_context(), gib(need), fmt::join(biggest, ", "), w, w == 1 ? "" : "s",
        w == 1 ? "has" : "have", w, gib(topo.memory_limit_bytes()), gib(have), topo.memory_kind(),
        topo.compute_device == "cuda" ? topo.device_memory_gib : topo.host_memory_gib,
        topo.reserved_fraction));
}

}  // namespace

namespace {

double least_work(const TableOptions& t, int world_size) {
    double w = std::numeric_limits<double>::max();
    for (const Option& o : t.options) {
        w = std::min(w, o.cost.total_s(world_size));
    }
    return w;
}

// Each table's options and dominant share, in placement order (planner.h steps 1 and 3).
std::vector<TableOptions> table_options(const Config& config,
                                        const PlacementEnv& env,
                                        const CostModel& model) {
    std::vector<TableOptions> tables;
    double all_time = 0;
    double all_memory = 0;
    for (const ModelConfig::Table& t : config.model.tables) {
        TableOptions to;
        to.table = &t;
        for (const ShardingConfig::Table& e : config.sharding.tables) {
            to.entry = e.name == t.name ? &e : to.entry;
        }
        to.options = enumerate_options(t, to.entry, config.sharding, env, model);
        all_time += to.options.front().cost.total_s(env.world_size);
        all_memory += static_cast<double>(total_memory(to.options.front(), env.world_size));
        tables.push_back(std::move(to));
    }
    for (TableOptions& t : tables) {
        const Option& first = t.options.front();
        t.share = std::max(
            first.cost.total_s(env.world_size) / std::max(all_time, 1e-30),
            static_cast<double>(total_memory(first, env.world_size)) / std::max(all_memory, 1.0));
    }
    // Pinned tables first, then the largest dominant share; stable keeps model order on ties.
    std::stable_sort(tables.begin(), tables.end(),
                     [](const TableOptions& a, const TableOptions& b) {
                         const bool pa = a.options.front().pinned, pb = b.options.front().pinned;
                         return pa != pb ? pa : a.share > b.share;
                     });
    return tables;
}

// The option with the lowest score: the larger of the slowest rank's time after placing it and
// the average rank time once every table is placed (this one as the option, the rest at their
// least work). The first term keeps big tables from piling on a rank, the second keeps small
// ones from spreading (a row_wise or column_wise split only adds communication when the ranks
// are balanced anyway). Ties go to the least work. The memory-first pass takes the option that
// leaves the fullest rank emptiest instead. Null when nothing fits.
const Option* choose_option(const TableOptions& t,
                            const Loads& loads,
                            const PlacementEnv& env,
                            double remaining,
                            Placement& chosen) {
    const Option* best = nullptr;
    for (const Option& o : t.options) {
        const Placement p = place(o, loads, env, remaining);
        if (!p.ok) {
            continue;
        }
        const double tol = 1e-9 * std::max(p.score, chosen.score);
        const bool by_memory = loads.memory_first && p.peak_memory != chosen.peak_memory;
        if (!best || (by_memory && p.peak_memory < chosen.peak_memory) ||
            (!by_memory && (p.score < chosen.score - tol ||
                            (p.score <= chosen.score + tol && p.work < chosen.work)))) {
            best = &o;
            chosen = p;
        }
    }
    return best;
}

}  // namespace

namespace {

// One greedy pass over the ordered tables (planner.h step 3); throws when a table cannot fit.
ShardingPlan partition(const std::vector<TableOptions>& tables,
                       const CostModel& model,
                       bool memory_first) {
    const Topology& topology = model.topology();
    const PlacementEnv env = topology.placement();
    double remaining = 0;
    for (const TableOptions& t : tables) {
        remaining += least_work(t, env.world_size);
    }
    Loads loads;
    loads.limit = topology.memory_limit_bytes();
    loads.host_limit = topology.host_limit_bytes();
    loads.disk_limit = topology.disk_limit_bytes();
    loads.host.assign(static_cast<size_t>(env.world_size), 0);
    loads.disk.assign(static_cast<size_t>(env.world_size), 0);
    loads.memory_first = memory_first;
    loads.time.assign(static_cast<size_t>(env.world_size), model.dense_cost().total_s());
    loads.memory.assign(static_cast<size_t>(env.world_size), model.dense_cost().memory_bytes);
    ShardingPlan plan;
    plan.env = env;
    for (const TableOptions& t : tables) {
        remaining -= least_work(t, env.world_size);
        Placement chosen;
        const Option* best = choose_option(t, loads, env, std::max(remaining, 0.0), chosen);
        if (!best) {
            fail_to_place(t, loads, topology);
        }
        commit(*best, chosen, loads);
        std::vector<int64_t> widths;
        if (best->sharding.sharding_type == ShardingType::kColumnWise) {
            for (const ShardMetadata& s : best->sharding.sharding_spec) {
                widths.push_back(s.shard_sizes[1]);
            }
        }
        plan.tables[t.table->name] = make_parameter_sharding(
            best->sharding.sharding_type, best->sharding.compute_kernel, t.table->num_embeddings,
            t.table->embedding_dim, chosen.ranks, widths, env);
    }
    return plan;
}

}  // namespace

ShardingPlan EmbeddingShardingPlanner::plan(const Config& config) const {
    const PlacementEnv env = topology_.placement();
    env.check();
    const CostModel model(config, topology_, stats_);
    const std::vector<TableOptions> tables = table_options(config, env, model);
    check_total_memory(tables, model.dense_cost(), topology_);
    ShardingPlan plan;
    try {
        plan = partition(tables, model, false);
    } catch (const Error& time_first) {
        // Balancing time can strand memory; a memory-first pass packs what the first could not.
        try {
            plan = partition(tables, model, true);
        } catch (const Error&) {
            throw time_first;
        }
    }
    for (auto& [name, ps] : plan.tables)
        set_cache_params(ps, config.sharding, name);
    check_plan(plan, config.model.tables);
    return plan;
}

void check_tier_budgets(const ShardingPlan& plan, const Config& config, const Topology& topology) {
    const int64_t host_limit = topology.host_limit_bytes();
    const int64_t disk_limit = topology.disk_limit_bytes();
    if (host_limit == 0 && disk_limit == 0)
        return;
    const CostModel model(config, topology);
    const auto w = static_cast<size_t>(topology.world_size);
    std::vector<int64_t> host(w, 0), disk(w, 0);
    std::vector<std::vector<std::string>> host_tables(w), disk_tables(w);
    for (const ModelConfig::Table& table : config.model.tables) {
        const ParameterSharding& ps = plan.at(table.name);
        const OptionCost cost = model.table_cost(table, ps);
        for (size_t i = 0; i < cost.shards.size(); ++i) {
            const auto r = static_cast<size_t>(ps.sharding_type == ShardingType::kDataParallel
                                                   ? static_cast<int>(i)
                                                   : ps.sharding_spec[i].rank);
            const RankCost& c = cost.shards[i];
            host[r] += c.host_bytes;
            disk[r] += c.disk_bytes;
            if (c.host_bytes > 0)
                host_tables[r].push_back(fmt::format("'{}' {}", table.name, gib(c.host_bytes)));
            if (c.disk_bytes > 0)
                disk_tables[r].push_back(fmt::format("'{}' {}", table.name, gib(c.disk_bytes)));
        }
    }
    for (size_t r = 0; r < w; ++r) {
        SR_CHECK(disk_limit == 0 || disk[r] <= disk_limit,
                 "{}: rank {} needs {} of disk for its key_value rows once all are written ({}), "
                 "the topology gives {} (disk_gib {}); use more ranks, a topology with more disk "
                 "or smaller key_value tables",
                 error_context(), r, gib(disk[r]), fmt::join(disk_tables[r], ", "), gib(disk_limit),
                 topology.disk_gib);
        SR_CHECK(host_limit == 0 || host[r] <= host_limit,
                 "{}: rank {} needs {} of DDR for its fused_uvm(_caching) rows ({}), the topology "
                 "gives {} "
                 "(host_memory_gib {} less reserved_fraction {}); use more ranks or keep some "
                 "tables fused",
                 error_context(), r, gib(host[r]), fmt::join(host_tables[r], ", "), gib(host_limit),
                 topology.host_memory_gib, topology.reserved_fraction);
    }
}

ShardingPlan make_sharding_plan(const Config& config,
                                const Topology& topology,
                                const CacheStatistics* stats) {
    const ShardingConfig& sharding = config.sharding;
    ShardingPlan plan;
    try {
        if (!sharding.plan_file.empty()) {
            plan = load_plan(sharding.plan_file, config.model.tables, topology.placement());
        } else if (sharding.planner == "auto") {
            plan = EmbeddingShardingPlanner(topology, stats).plan(config);
        } else {
            plan = manual_plan(config.model, sharding, topology.placement());
        }
        check_plan(plan, config.model.tables);
        check_tier_budgets(plan, config, topology);
    } catch (const Error& e) {
        if (sharding.replica_groups <= 1)
            throw;
        // The world of these messages is one replica group, not the ranks launched.
        const int64_t world = topology.world_size * sharding.replica_groups;
        throw Error(fmt::format(
            "{}\n  (sharding.replica_groups {}: the tables are sharded within each group of {} of "
            "the {} ranks, so the ranks and world size above are a group's; `shardrec plan "
            "CONFIG --world-size {}` plans within a group)",
            e.what(), sharding.replica_groups, topology.world_size, world, world));
    }
    return plan;
}

int sharding_group_size(const ShardingConfig& sharding, int world_size, int local_size) {
    const int64_t R = sharding.replica_groups;
    SR_CHECK(R >= 1 && world_size % R == 0,
             "sharding.replica_groups {} does not divide the {} rank(s): each replica group "
             "needs world_size / replica_groups ranks",
             R, world_size);
    const int G = world_size / static_cast<int>(R);
    local_size = std::clamp(local_size, 1, world_size);
    SR_CHECK(R == 1 || G % local_size == 0 || local_size % G == 0,
             "sharding.replica_groups {}: a group of {} consecutive ranks straddles a node of {} "
             "ranks; choose replica_groups so that a group is whole nodes or a part of one node",
             R, G, local_size);
    return G;
}

void note_unchecked_rank_lists(const ShardingConfig& sharding) {
    for (const ShardingConfig::Table& t : sharding.tables) {
        if (t.ranks.empty())
            continue;
        log::root().info(
            "{}: one process trains the tables unsharded, so the sharding section's rank lists "
            "are not checked here; they are under mpirun -np N, or by `shardrec plan CONFIG "
            "--world-size N --planner config`",
            t.location);
        return;
    }
}

}  // namespace shardrec
