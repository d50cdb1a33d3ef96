#include "engine/distributed/sharding_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "engine/core/error.h"

namespace shardrec {

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
    return fmt::format("[{}]", fmt::join(ranks, ", "));
}

// Row blocks of `rows` over `ranks` (row_wise, table_row_wise).
std::vector<ShardMetadata> row_shards(int64_t rows,
                                      int64_t cols,
                                      const std::vector<int>& ranks,
                                      const PlacementEnv& env) {
    const auto n = static_cast<int64_t>(ranks.size());
    const std::vector<int64_t> sizes = row_wise_shard_rows(rows, n);
    std::vector<ShardMetadata> shards;
    int64_t offset = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
        shards.push_back({{offset, 0}, {sizes[i], cols}, ranks[i], env.device_of(ranks[i])});
        offset += sizes[i];
    }
    return shards;
}

std::vector<ShardMetadata> column_shards(int64_t rows,
                                         int64_t cols,
                                         const std::vector<int>& ranks,
                                         std::vector<int64_t> widths,
                                         const PlacementEnv& env) {
    if (widths.empty()) {
        widths = even_column_widths(cols, static_cast<int64_t>(ranks.size()));
    }
    std::vector<ShardMetadata> shards;
    int64_t offset = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
        shards.push_back({{0, offset}, {rows, widths[i]}, ranks[i], env.device_of(ranks[i])});
        offset += widths[i];
    }
    return shards;
}

std::string column_problem(int64_t cols,
                           const std::vector<int>& ranks,
                           const std::vector<int64_t>& widths) {
    const auto k = static_cast<int64_t>(ranks.size());
    if (k < 1 || k > cols) {
        return fmt::format("column_wise needs 1 to {} shards (one rank each), got {}", cols, k);
    }
    if (widths.empty()) {
        return "";
    }
    if (static_cast<int64_t>(widths.size()) != k) {
        return fmt::format("column_wise has {} ranks but {} column widths: give one per shard", k,
                           widths.size());
    }
    const bool positive =
        std::all_of(widths.begin(), widths.end(), [](int64_t w) { return w > 0; });
    const int64_t total = std::accumulate(widths.begin(), widths.end(), int64_t{0});
    if (!positive || total != cols) {
        return fmt::format("column widths [{}] must be >= 1 and add up to the {} columns",
                           fmt::join(widths, ", "), cols);
    }
    return "";
}

// The rank list each type takes (see the header).
std::string ranks_problem(ShardingType type,
                          const std::vector<int>& ranks,
                          const PlacementEnv& env) {
    for (int r : ranks) {
        if (r < 0 || r >= env.world_size) {
            return fmt::format("rank {} is out of range for world size {} (ranks 0..{})", r,
                               env.world_size, env.world_size - 1);
        }
    }
    switch (type) {
        case ShardingType::kTableWise:
            return ranks.size() == 1
                       ? ""
                       : "table_wise takes exactly one rank, got " + ranks_text(ranks);
        case ShardingType::kRowWise:
        case ShardingType::kDataParallel:
            if (ranks != all_ranks(env.world_size)) {
                return fmt::format("{} spans every rank 0..{} in order, got {}",
                                   sharding_type_name(type), env.world_size - 1, ranks_text(ranks));
            }
            return "";
        case ShardingType::kTableRowWise:
            if (ranks.empty() || ranks[0] % env.local_size != 0 ||
                ranks != node_ranks(env.node_of(ranks[0]), env.local_size)) {
                return fmt::format("table_row_wise spans the {} ranks of one node in order, got {}",
                                   env.local_size, ranks_text(ranks));
            }
            return "";
        case ShardingType::kColumnWise:
            return "";
    }
    return "";
}

}  // namespace

std::string PlacementEnv::device_of(int rank) const {
    if (compute_device == "cuda") {
        return fmt::format("cuda:{}", rank % local_size);
    }
    return compute_device;
}

void PlacementEnv::check() const {
    SR_CHECK(world_size >= 1, "world size must be >= 1, got {}", world_size);
    SR_CHECK(local_size >= 1 && world_size % local_size == 0,
             "local size (ranks per node) {} must be >= 1 and divide the world size {}", local_size,
             world_size);
    SR_CHECK(compute_device == "cpu" || compute_device == "cuda",
             "compute device must be cpu or cuda, got '{}'", compute_device);
}

bool ShardMetadata::operator==(const ShardMetadata& other) const {
    return shard_offsets == other.shard_offsets && shard_sizes == other.shard_sizes &&
           rank == other.rank && device == other.device;
}

std::optional<ShardMetadata> parse_placement(const std::string& placement) {
    // "rank:<R>/<device>"
    const std::string prefix = "rank:";
    const size_t slash = placement.find('/');
    if (placement.compare(0, prefix.size(), prefix) != 0 || slash == std::string::npos ||
        slash == prefix.size() || slash + 1 == placement.size()) {
        return std::nullopt;
    }
    const std::string digits = placement.substr(prefix.size(), slash - prefix.size());
    if (digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return std::nullopt;
    }
    ShardMetadata shard;
    shard.rank = std::stoi(digits);
    shard.device = placement.substr(slash + 1);
    return shard;
}

std::vector<ShardMetadata> ParameterSharding::shards_on(int rank) const {
    std::vector<ShardMetadata> out;
    for (const ShardMetadata& s : sharding_spec) {
        if (s.rank == rank) {
            out.push_back(s);
        }
    }
    return out;
}

bool ParameterSharding::operator==(const ParameterSharding& other) const {
    return sharding_type == other.sharding_type && compute_kernel == other.compute_kernel &&
           ranks == other.ranks && sharding_spec == other.sharding_spec &&
           cache_params == other.cache_params;
}

int64_t row_block_size(int64_t rows, int64_t num_shards) {
    SR_CHECK(rows >= 0 && num_shards >= 1, "row blocks of {} rows over {} shards", rows,
             num_shards);
    return (rows + num_shards - 1) / num_shards;
}

std::vector<int64_t> row_wise_shard_rows(int64_t rows, int64_t num_shards) {
    const int64_t block = row_block_size(rows, num_shards);
    std::vector<int64_t> sizes(static_cast<size_t>(num_shards), 0);
    int64_t left = rows;
    for (int64_t& s : sizes) {
        s = std::min(block, left);
        left -= s;
    }
    return sizes;
}

std::vector<int64_t> even_column_widths(int64_t cols, int64_t num_shards) {
    SR_CHECK(num_shards >= 1 && num_shards <= cols, "cannot split {} columns into {} shards", cols,
             num_shards);
    std::vector<int64_t> widths(static_cast<size_t>(num_shards), cols / num_shards);
    widths.back() += cols % num_shards;
    return widths;
}

std::vector<int> all_ranks(int world_size) {
    std::vector<int> ranks(static_cast<size_t>(world_size));
    std::iota(ranks.begin(), ranks.end(), 0);
    return ranks;
}

std::vector<int> node_ranks(int node, int local_size) {
    std::vector<int> ranks(static_cast<size_t>(local_size));
    std::iota(ranks.begin(), ranks.end(), node * local_size);
    return ranks;
}

std::vector<int> expand_ranks(ShardingType type,
                              const std::vector<int>& ranks,
                              const PlacementEnv& env) {
    if (type == ShardingType::kTableRowWise && ranks.size() == 1 && env.local_size > 1 &&
        ranks[0] >= 0 && ranks[0] < env.world_size && ranks[0] % env.local_size == 0) {
        return node_ranks(env.node_of(ranks[0]), env.local_size);
    }
    return ranks;
}

std::string sharding_problem(ShardingType type,
                             EmbeddingComputeKernel kernel,
                             int64_t rows,
                             int64_t cols,
                             const std::vector<int>& ranks,
                             const std::vector<int64_t>& column_widths,
                             const PlacementEnv& env) {
    if (rows < 1 || cols < 1) {
        return fmt::format("a table needs rows and columns, got [{}, {}]", rows, cols);
    }
    if (!column_widths.empty() && type != ShardingType::kColumnWise) {
        return fmt::format("column widths are only for column_wise, not {}",
                           sharding_type_name(type));
    }
    // TorchRec's data-parallel tables train through the dense path (gradients all-reduced).
    if (type == ShardingType::kDataParallel && kernel != EmbeddingComputeKernel::kDense) {
        return fmt::format("data_parallel tables use the dense compute kernel, not {}",
                           compute_kernel_name(kernel));
    }
    // Sharded tables train with the fused optimizer only; TorchRec's DENSE kernel on one (its
    // gradient materialised and applied by the dense optimizer) is refused, not run as fused.
    if (type != ShardingType::kDataParallel && kernel == EmbeddingComputeKernel::kDense) {
        return fmt::format(
            "the dense compute kernel is only for data_parallel tables; {} tables use fused",
            sharding_type_name(type));
    }
    std::string problem = ranks_problem(type, ranks, env);
    if (problem.empty() && type == ShardingType::kColumnWise) {
        problem = column_problem(cols, ranks, column_widths);
    }
    return problem;
}

ParameterSharding make_parameter_sharding(ShardingType type,
                                          EmbeddingComputeKernel kernel,
                                          int64_t rows,
                                          int64_t cols,
                                          const std::vector<int>& ranks,
                                          const std::vector<int64_t>& column_widths,
                                          const PlacementEnv& env) {
    const std::string problem =
        sharding_problem(type, kernel, rows, cols, ranks, column_widths, env);
    SR_CHECK(problem.empty(), "{}", problem);
    ParameterSharding ps;
    ps.sharding_type = type;
    ps.compute_kernel = kernel;
    ps.ranks = ranks;
    switch (type) {
        case ShardingType::kTableWise:
            ps.sharding_spec = {{{0, 0}, {rows, cols}, ranks[0], env.device_of(ranks[0])}};
            break;
        case ShardingType::kRowWise:
        case ShardingType::kTableRowWise:
            ps.sharding_spec = row_shards(rows, cols, ranks, env);
            break;
        case ShardingType::kColumnWise:
            ps.sharding_spec = column_shards(rows, cols, ranks, column_widths, env);
            break;
        case ShardingType::kDataParallel:
            break;
    }
    return ps;
}

std::string layout_problem(const ParameterSharding& ps,
                           int64_t rows,
                           int64_t cols,
                           const PlacementEnv& env) {
    std::vector<int64_t> widths;
    if (ps.sharding_type == ShardingType::kColumnWise) {
        for (const ShardMetadata& s : ps.sharding_spec) {
            widths.push_back(s.shard_sizes[1]);
        }
        if (ps.sharding_spec.size() != ps.ranks.size()) {
            return fmt::format("{} shards for {} ranks: column_wise has one shard per rank",
                               ps.sharding_spec.size(), ps.ranks.size());
        }
    }
    const std::string problem =
        sharding_problem(ps.sharding_type, ps.compute_kernel, rows, cols, ps.ranks, widths, env);
    if (!problem.empty()) {
        return problem;
    }
    const ParameterSharding want = make_parameter_sharding(ps.sharding_type, ps.compute_kernel,
                                                           rows, cols, ps.ranks, widths, env);
    const auto describe = [](const ShardMetadata& s) {
        return fmt::format("offsets [{}, {}] sizes [{}, {}] on {}", s.shard_offsets[0],
                           s.shard_offsets[1], s.shard_sizes[0], s.shard_sizes[1], s.placement());
    };
    const size_t n = std::max(want.sharding_spec.size(), ps.sharding_spec.size());
    for (size_t i = 0; i < n; ++i) {
        if (i >= ps.sharding_spec.size()) {
            return fmt::format("shard {} is missing, expected {}", i,
                               describe(want.sharding_spec[i]));
        }
        if (i >= want.sharding_spec.size()) {
            return fmt::format(
                "shard {} ({}) is one too many: the {} layout of [{}, {}] on {} "
                "has {} shards",
                i, describe(ps.sharding_spec[i]), sharding_type_name(ps.sharding_type), rows, cols,
                ranks_text(ps.ranks), want.sharding_spec.size());
        }
        if (ps.sharding_spec[i] != want.sharding_spec[i]) {
            return fmt::format("shard {}: got {}, the {} layout of [{}, {}] has {}", i,
                               describe(ps.sharding_spec[i]), sharding_type_name(ps.sharding_type),
                               rows, cols, describe(want.sharding_spec[i]));
        }
    }
    return "";
}

}  // namespace shardrec
