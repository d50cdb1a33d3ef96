#include "engine/config/sharding_names.h"

namespace shardrec {

namespace {

struct TypeName {
    ShardingType type;
    const char* name;
    const char* short_name;
};

constexpr TypeName kTypeNames[] = {
    {ShardingType::kDataParallel, "data_parallel", "dp"},
    {ShardingType::kTableWise, "table_wise", "tw"},
    {ShardingType::kColumnWise, "column_wise", "cw"},
    {ShardingType::kRowWise, "row_wise", "rw"},
    {ShardingType::kTableRowWise, "table_row_wise", "twrw"},
};

}  // namespace

const char* sharding_type_name(ShardingType type) {
    for (const TypeName& t : kTypeNames) {
        if (t.type == type) {
            return t.name;
        }
    }
    return "unknown";
}

std::optional<ShardingType> parse_sharding_type(const std::string& name) {
    for (const TypeName& t : kTypeNames) {
        if (name == t.name || name == t.short_name) {
            return t.type;
        }
    }
    return std::nullopt;
}

const std::vector<std::string>& sharding_type_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const TypeName& t : kTypeNames) {
            out.emplace_back(t.name);
        }
        return out;
    }();
    return names;
}

const char* compute_kernel_name(EmbeddingComputeKernel kernel) {
    return kernel == EmbeddingComputeKernel::kDense ? "dense" : "fused";
}

std::optional<EmbeddingComputeKernel> parse_compute_kernel(const std::string& name) {
    if (name == "dense") {
        return EmbeddingComputeKernel::kDense;
    }
    if (name == "fused") {
        return EmbeddingComputeKernel::kFused;
    }
    return std::nullopt;
}

const std::vector<std::string>& compute_kernel_names() {
    static const std::vector<std::string> names = {"dense", "fused"};
    return names;
}

}  // namespace shardrec
