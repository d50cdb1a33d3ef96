// TorchRec's plan print: two text tables, formatted as torchrec.distributed.types._tabulate does
// (headers centred with Python's str.center, cells left-justified, " | " between columns).
#include <fmt/format.h>

#include <algorithm>

#include "engine/distributed/sharding_plan.h"

namespace shardrec {

namespace {

using Row = std::vector<std::string>;

// Python's str.center: the odd space goes left when the width is odd, right when it is even.
std::string center(const std::string& s, size_t width) {
    if (s.size() >= width) {
        return s;
    }
    const size_t margin = width - s.size();
    const size_t left = margin / 2 + (margin & width & 1);
    return std::string(left, ' ') + s + std::string(margin - left, ' ');
}

std::string ljust(const std::string& s, size_t width) {
    return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string tabulate(const std::vector<Row>& rows, const Row& headers) {
    std::vector<size_t> widths(headers.size());
    for (size_t c = 0; c < headers.size(); ++c) {
        widths[c] = headers[c].size();
        for (const Row& row : rows) {
            widths[c] = std::max(widths[c], row[c].size());
        }
    }
    std::vector<std::string> lines;
    std::vector<std::string> cells;
    for (size_t c = 0; c < headers.size(); ++c) {
        cells.push_back(center(headers[c], widths[c]));
    }
    lines.push_back(fmt::format("{}", fmt::join(cells, " | ")));
    cells.clear();
    for (size_t w : widths) {
        cells.emplace_back(w, '-');
    }
    lines.push_back(fmt::format("{}", fmt::join(cells, " | ")));
    for (const Row& row : rows) {
        cells.clear();
        for (size_t c = 0; c < row.size(); ++c) {
            cells.push_back(ljust(row[c], widths[c]));
        }
        lines.push_back(fmt::format("{}", fmt::join(cells, " | ")));
    }
    return fmt::format("{}", fmt::join(lines, "\n"));
}

// A Python list repr, elided past max_items: "[0, 1, 2, ..., 63]".
std::string list_text(const std::vector<int>& items, size_t max_items) {
    if (items.size() <= max_items || items.size() <= 4) {
        return fmt::format("[{}]", fmt::join(items, ", "));
    }
    return fmt::format("[{}, {}, {}, ..., {}]", items[0], items[1], items[2], items.back());
}

Row shard_row(const std::string& name, const ShardMetadata& s) {
    return {name, fmt::format("[{}, {}]", s.shard_offsets[0], s.shard_offsets[1]),
            fmt::format("[{}, {}]", s.shard_sizes[0], s.shard_sizes[1]), s.placement()};
}

}  // namespace

std::string plan_table(const ShardingPlan& plan,
                       const std::vector<ModelConfig::Table>& tables,
                       const PlanTableOptions& options) {
    std::vector<Row> params;
    std::vector<Row> shards;
    for (const ModelConfig::Table& table : tables) {
        const ParameterSharding& ps = plan.at(table.name);
        params.push_back({table.name, sharding_type_name(ps.sharding_type),
                          compute_kernel_name(ps.compute_kernel),
                          list_text(ps.ranks, options.max_ranks)});
        const auto& spec = ps.sharding_spec;
        const size_t keep = std::max<size_t>(options.max_shards_per_table, 3);
        if (spec.size() <= keep) {
            for (const ShardMetadata& s : spec) {
                shards.push_back(shard_row(table.name, s));
            }
            continue;
        }
        shards.push_back(shard_row(table.name, spec[0]));
        shards.push_back(shard_row(table.name, spec[1]));
        shards.push_back({table.name, "...", fmt::format("({} more)", spec.size() - 3), "..."});
        shards.push_back(shard_row(table.name, spec.back()));
    }
    return tabulate(params, {"param", "sharding type", "compute kernel", "ranks"}) + "\n\n" +
           tabulate(shards, {"param", "shard offsets", "shard sizes", "placement"});
}

}  // namespace shardrec
