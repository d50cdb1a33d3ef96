#include "engine/distributed/permute_sparse_data.h"

#include <cstring>

namespace shardrec {
namespace {

void check_permute_args(const std::vector<int64_t>& permute,
                        const std::vector<int64_t>& segment_sizes,
                        const Tensor& lengths,
                        const Tensor& values,
                        const Tensor* weights,
                        const Tensor& permuted_lengths,
                        const Tensor& permuted_values,
                        const Tensor* permuted_weights) {
    SR_CHECK(lengths.device().is_cpu() && values.device().is_cpu(),
             "permute_sparse_data needs host tensors");
    SR_CHECK(permute.size() == segment_sizes.size(),
             "permute_sparse_data: {} permute entries for {} segments", permute.size(),
             segment_sizes.size());
    std::vector<char> seen(permute.size(), 0);
    for (int64_t p : permute) {
        SR_CHECK(p >= 0 && p < static_cast<int64_t>(permute.size()) && !seen[p],
                 "permute_sparse_data: permute is not a permutation of [0, {}) (entry {})",
                 permute.size(), p);
        seen[p] = 1;
    }
    int64_t num_bags = 0;
    for (int64_t s : segment_sizes) {
        SR_CHECK(s >= 0, "permute_sparse_data: negative segment size {}", s);
        num_bags += s;
    }
    SR_CHECK(lengths.dtype() == DType::kI64 && lengths.numel() == num_bags,
             "permute_sparse_data: lengths {} for {} bags", lengths.str(), num_bags);
    SR_CHECK(values.dim() >= 1, "permute_sparse_data: values need a row dimension");
    SR_CHECK(
        permuted_lengths.shape() == lengths.shape() && permuted_lengths.dtype() == DType::kI64 &&
            permuted_values.shape() == values.shape() && permuted_values.dtype() == values.dtype(),
        "permute_sparse_data: outputs {} {} do not match inputs {} {}", permuted_lengths.str(),
        permuted_values.str(), lengths.str(), values.str());
    SR_CHECK((weights == nullptr) == (permuted_weights == nullptr),
             "permute_sparse_data: permuted_weights is needed exactly when weights is given");
    if (weights != nullptr) {
        SR_CHECK(weights->dtype() == DType::kF32 && weights->numel() == values.size(0) &&
                     permuted_weights->dtype() == DType::kF32 &&
                     permuted_weights->numel() == values.size(0),
                 "permute_sparse_data: weights {} / {} for {} values", weights->str(),
                 permuted_weights->str(), values.size(0));
    }
}

}  // namespace

void permute_sparse_data(const std::vector<int64_t>& permute,
                         const std::vector<int64_t>& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights) {
    check_permute_args(permute, segment_sizes, lengths, values, weights, permuted_lengths,
                       permuted_values, permuted_weights);
    const size_t num_segments = segment_sizes.size();
    const int64_t num_values = values.size(0);
    const size_t row_bytes = num_values == 0 ? 0 : values.nbytes() / num_values;
    const int64_t* len = lengths.data<int64_t>();

    // Where each input segment starts in lengths (bags) and in values (rows).
    std::vector<int64_t> bag_start(num_segments + 1, 0);
    std::vector<int64_t> row_start(num_segments + 1, 0);
    for (size_t k = 0; k < num_segments; ++k) {
        bag_start[k + 1] = bag_start[k] + segment_sizes[k];
        int64_t rows = 0;
        for (int64_t i = bag_start[k]; i < bag_start[k + 1]; ++i) {
            SR_CHECK(len[i] >= 0, "permute_sparse_data: bag {} has negative length {}", i, len[i]);
            rows += len[i];
        }
        row_start[k + 1] = row_start[k] + rows;
    }
    SR_CHECK(row_start[num_segments] == num_values,
             "permute_sparse_data: lengths sum to {} but there are {} values",
             row_start[num_segments], num_values);

    const auto* src_rows = static_cast<const char*>(values.data_ptr());
    auto* dst_rows = static_cast<char*>(permuted_values.data_ptr());
    const float* src_w = weights != nullptr ? weights->data<float>() : nullptr;
    float* dst_w = permuted_weights != nullptr ? permuted_weights->data<float>() : nullptr;
    int64_t* dst_len = permuted_lengths.data<int64_t>();
    int64_t at_bag = 0;
    int64_t at_row = 0;
    for (size_t i = 0; i < num_segments; ++i) {
        const auto k = static_cast<size_t>(permute[i]);
        const int64_t bags = bag_start[k + 1] - bag_start[k];
        const int64_t rows = row_start[k + 1] - row_start[k];
        if (bags > 0) {
            std::memcpy(dst_len + at_bag, len + bag_start[k], sizeof(int64_t) * bags);
        }
        if (rows > 0) {
            std::memcpy(dst_rows + at_row * row_bytes, src_rows + row_start[k] * row_bytes,
                        row_bytes * static_cast<size_t>(rows));
            if (src_w != nullptr) {
                std::memcpy(dst_w + at_row, src_w + row_start[k], sizeof(float) * rows);
            }
        }
        at_bag += bags;
        at_row += rows;
    }
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
