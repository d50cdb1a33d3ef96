#include "engine/distributed/permute_sparse_data.h"

#include "kernels/jagged.h"

namespace shardrec {

// The CPU op with the vectors wrapped as host tensors (no copies, no allocations); the op checks
// every argument.
void permute_sparse_data(const std::vector<int64_t>& permute,
                         const std::vector<int64_t>& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights) {
    SR_CHECK(lengths.device().is_cpu() && values.device().is_cpu(),
             "permute_sparse_data needs host tensors");
    const auto host_i64 = [](const std::vector<int64_t>& v) {
        return Tensor::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())},
                                 DType::kI64);
    };
    kernels::permute_sparse_data(host_i64(permute), host_i64(segment_sizes), lengths, values,
                                 weights, permuted_lengths, permuted_values, permuted_weights,
                                 Stream::cpu());
}

std::vector<int64_t> recat_rank_order(int64_t num_splits, int64_t stagger) {
    SR_CHECK(num_splits >= 1 && stagger >= 1 && num_splits % stagger == 0,
             "get_recat: stagger {} must divide num_splits {}", stagger, num_splits);
    const int64_t groups = num_splits / stagger;
    std::vector<int64_t> order;
    order.reserve(static_cast<size_t>(num_splits));
    for (int64_t x = 0; x < groups; ++x) {
        for (int64_t y = 0; y < stagger; ++y) {
            order.push_back(x + groups * y);
        }
    }
    return order;
}

std::vector<int64_t> get_recat(int64_t local_split, int64_t num_splits, int64_t stagger) {
    SR_CHECK(local_split >= 0, "get_recat: negative local_split {}", local_split);
    const std::vector<int64_t> order = recat_rank_order(num_splits, stagger);
    std::vector<int64_t> recat;
    recat.reserve(static_cast<size_t>(local_split * num_splits));
    for (int64_t f = 0; f < local_split; ++f) {
        for (int64_t r : order) {
            recat.push_back(f + r * local_split);
        }
    }
    return recat;
}

}  // namespace shardrec
