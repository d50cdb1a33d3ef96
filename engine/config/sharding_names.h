// The sharding vocabulary's names, with TorchRec's spelling: ShardingType and
// EmbeddingComputeKernel with their names and parsers. Here, below engine/distributed, because the
// config reader checks and canonicalises these names; engine/distributed/sharding_types.h builds
// the shard layouts on them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace shardrec {

enum class ShardingType { kDataParallel, kTableWise, kColumnWise, kRowWise, kTableRowWise };

enum class EmbeddingComputeKernel {
    kDense,  // gradients into a dense [E, D] buffer, applied by the dense optimizer (data_parallel)
    kFused,  // the sparse optimizer applied to the touched rows inside the lookup's backward
    // Fused, with the rows and their optimizer state in a file per shard on local disk and a
    // cache of them in DRAM where the kernels run (TorchRec's KEY_VALUE; the CPU's tier).
    kKeyValue,
    // Fused, with the rows and their optimizer state in pinned host memory mapped into the GPU's
    // address space, read and updated in place by the same kernels over PCIe (TorchRec's
    // FUSED_UVM; CUDA only).
    kFusedUvm,
    // Fused, with the rows and their optimizer state in host memory and a cache of them in HBM
    // where the kernels run (TorchRec's FUSED_UVM_CACHING; CUDA only).
    kFusedUvmCaching,
};

// How a cache picks the row it evicts (TorchRec CacheAlgorithm).
enum class CacheAlgorithm { kLru, kLfu };

// The cache of a key_value or fused_uvm_caching table (TorchRec CacheParams).
struct CacheParams {
    double load_factor = 0.2;  // cache slots as a fraction of the shard's rows
    CacheAlgorithm algorithm = CacheAlgorithm::kLru;
    // The cached rows' dtype (TorchRec's cache precision); nullopt: the table's data_type.
    std::optional<DType> precision;
    // The prefetch pipeline fills the cache beside the compute (TorchRec's prefetch_pipeline):
    // the planner counts the misses' time as overlapped with the step.
    bool prefetch_pipeline = false;

    bool operator==(const CacheParams& o) const {
        return load_factor == o.load_factor && algorithm == o.algorithm &&
               precision == o.precision && prefetch_pipeline == o.prefetch_pipeline;
    }
};

// Whether the kernel keeps its rows behind a cache (key_value, fused_uvm_caching).
inline bool is_cached_kernel(EmbeddingComputeKernel kernel) {
    return kernel == EmbeddingComputeKernel::kKeyValue ||
           kernel == EmbeddingComputeKernel::kFusedUvmCaching;
}

// "data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise".
const char* sharding_type_name(ShardingType type);
// The names above, plus the informal "dp", "tw", "cw", "rw", "twrw"; nullopt for anything else.
std::optional<ShardingType> parse_sharding_type(const std::string& name);
// The five canonical names in the enum's order (for one_of lists and did-you-mean).
const std::vector<std::string>& sharding_type_names();

// "dense", "fused", "key_value", "fused_uvm", "fused_uvm_caching".
const char* compute_kernel_name(EmbeddingComputeKernel kernel);
std::optional<EmbeddingComputeKernel> parse_compute_kernel(const std::string& name);
const std::vector<std::string>& compute_kernel_names();

const char* cache_algorithm_name(CacheAlgorithm algorithm);  // "lru", "lfu"
std::optional<CacheAlgorithm> parse_cache_algorithm(const std::string& name);

}  // namespace shardrec
