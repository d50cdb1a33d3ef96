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

namespace {

struct KernelName {
    EmbeddingComputeKernel kernel;
    const char* name;
};

constexpr KernelName kKernelNames[] = {
    {EmbeddingComputeKernel::kDense, "dense"},
    {EmbeddingComputeKernel::kFused, "fused"},
    {EmbeddingComputeKernel::kKeyValue, "key_value"},
    {EmbeddingComputeKernel::kFusedUvm, "fused_uvm"},
    {EmbeddingComputeKernel::kFusedUvmCaching, "fused_uvm_caching"},
};

}  // namespace

const char* compute_kernel_name(EmbeddingComputeKernel kernel) {
    for (const KernelName& k : kKernelNames) {
        if (k.kernel == kernel)
            return k.name;
    }
    return "?";
}

std::optional<EmbeddingComputeKernel> parse_compute_kernel(const std::string& name) {
    for (const KernelName& k : kKernelNames) {
        if (name == k.name)
            return k.kernel;
    }
    return std::nullopt;
}

const std::vector<std::string>& compute_kernel_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const KernelName& k : kKernelNames)
            out.emplace_back(k.name);
        return out;
    }();
    return names;
}

const char* cache_algorithm_name(CacheAlgorithm algorithm) {
    return algorithm == CacheAlgorithm::kLru ? "lru" : "lfu";
}

std::optional<CacheAlgorithm> parse_cache_algorithm(const std::string& name) {
    if (name == "lru")
        return CacheAlgorithm::kLru;
    if (name == "lfu")
        return CacheAlgorithm::kLfu;
    return std::nullopt;
}

}  // namespace shardrec
