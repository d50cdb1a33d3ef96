// The jagged ops on the CPU: plain sequential loops (they move a few bytes per id; the input
// dist's all-to-all, not these, is the cost), which are also the readable spec the CUDA
// definitions are tested against.
#include "kernels/jagged.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace shardrec::kernels::cpu {
namespace {

// fbgemm's bucket rule (kernels/jagged.h). x / block < R is x < block * R without the overflow of
// the product.
struct BucketRule {
    int64_t block;
    int64_t num_buckets;

    int64_t bucket(int64_t x) const {
        const int64_t in_range = x / block;
        return in_range < num_buckets ? in_range : x % num_buckets;
    }

    int64_t new_id(int64_t x) const {
        return x / block < num_buckets ? x % block : x / num_buckets;
    }
};

}  // namespace

void asynchronous_complete_cumsum(const Tensor& lengths, Tensor& out) {
    const int64_t n = lengths.numel();
    const int64_t* len = lengths.data<int64_t>();
    int64_t* off = out.data<int64_t>();
    off[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        off[i + 1] = off[i] + len[i];
    }
}

void permute_sparse_data(const Tensor& permute,
                         const Tensor& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights) {
    const auto num_segments = static_cast<size_t>(segment_sizes.numel());
    const int64_t* perm = permute.data<int64_t>();
    const int64_t* sizes = segment_sizes.data<int64_t>();
    const int64_t num_values = values.size(0);
    const size_t row_bytes = num_values == 0 ? 0 : values.nbytes() / num_values;
    const int64_t* len = lengths.data<int64_t>();

    // Where each input segment starts in lengths (bags) and in values (rows).
    std::vector<int64_t> bag_start(num_segments + 1, 0);
    std::vector<int64_t> row_start(num_segments + 1, 0);
    for (size_t k = 0; k < num_segments; ++k) {
        bag_start[k + 1] = bag_start[k] + sizes[k];
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
        const auto k = static_cast<size_t>(perm[i]);
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

void block_bucketize_sparse_features(const Tensor& lengths,
                                     const Tensor& indices,
                                     const Tensor& block_sizes,
                                     int64_t num_buckets,
                                     const Tensor* weights,
                                     bool bucketize_pos,
                                     Tensor& new_lengths,
                                     Tensor& new_indices,
                                     Tensor* new_weights,
                                     Tensor* unbucketize_permute) {
    const int64_t num_features = block_sizes.numel();
    const int64_t bags = lengths.numel();  // per bucket
    const int64_t batch = num_features > 0 ? bags / num_features : 0;
    const int64_t num_ids = indices.numel();
    const int64_t* len = lengths.data<int64_t>();
    const int64_t* ids = indices.data<int64_t>();
    const int64_t* block = block_sizes.data<int64_t>();
    int64_t* new_len = new_lengths.data<int64_t>();

    // Pass 1: the bucketized lengths [bucket][f][b], and the checks of lengths and ids.
    std::fill_n(new_len, new_lengths.numel(), int64_t{0});
    int64_t begin = 0;
    for (int64_t bag = 0; bag < bags; ++bag) {
        const int64_t f = bag / batch;
        SR_CHECK(len[bag] >= 0 && len[bag] <= num_ids - begin,
                 "block_bucketize_sparse_features: feature {} sample {} has length {} with {} of "
                 "{} ids left",
                 f, bag % batch, len[bag], num_ids - begin, num_ids);
        const BucketRule rule{block[f], num_buckets};
        for (int64_t i = begin; i < begin + len[bag]; ++i) {
            SR_CHECK(ids[i] >= 0, "block_bucketize_sparse_features: feature {} sample {} id {} < 0",
                     f, bag % batch, ids[i]);
            ++new_len[rule.bucket(ids[i]) * bags + bag];
        }
        begin += len[bag];
    }
    SR_CHECK(begin == num_ids,
             "block_bucketize_sparse_features: lengths sum to {} but there are {} ids", begin,
             num_ids);

    // Pass 2: every id (and its weight or position) to its place; cursor[k] is the next free
    // position of bucketized bag k, so ids keep their order inside a bag.
    std::vector<int64_t> cursor(static_cast<size_t>(new_lengths.numel()));
    int64_t at = 0;
    for (size_t k = 0; k < cursor.size(); ++k) {
        cursor[k] = at;
        at += new_len[k];
    }
    int64_t* v_out = new_indices.data<int64_t>();
    const float* w_in = weights != nullptr ? weights->data<float>() : nullptr;
    float* w_out = new_weights != nullptr ? new_weights->data<float>() : nullptr;
    int64_t* perm = unbucketize_permute != nullptr ? unbucketize_permute->data<int64_t>() : nullptr;
    begin = 0;
    for (int64_t bag = 0; bag < bags; ++bag) {
        const BucketRule rule{block[bag / batch], num_buckets};
        for (int64_t i = begin; i < begin + len[bag]; ++i) {
            const int64_t pos = cursor[rule.bucket(ids[i]) * bags + bag]++;
            v_out[pos] = rule.new_id(ids[i]);
            if (bucketize_pos) {
                w_out[pos] = static_cast<float>(i - begin);
            } else if (w_in != nullptr) {
                w_out[pos] = w_in[i];
            }
            if (perm != nullptr) {
                perm[i] = pos;
            }
        }
        begin += len[bag];
    }
}

}  // namespace shardrec::kernels::cpu
