// The jagged ops: argument checks (all of them, once) and the device switch. Contents only the
// host can read without a synchronisation (the permutation, segment and block sizes) are checked
// here when the tensors are on the CPU; per-entry contents (lengths, ids) in the CPU kernels.
#include "kernels/jagged.h"

#include <vector>

namespace shardrec::kernels {
namespace {

void check_i64_1d(const Tensor& t, const char* op, const char* name, Device device) {
    SR_CHECK(t.defined(), "{}: {} is undefined", op, name);
    SR_CHECK(t.dtype() == DType::kI64 && t.dim() == 1, "{}: {} must be i64 [n], got {}", op, name,
             t.str());
    SR_CHECK(t.device() == device, "{}: {} {} is not on {}", op, name, t.str(), device.str());
}

// Optional f32 [n] on `device`.
void check_f32_rows(const Tensor* t, const char* op, const char* name, int64_t n, Device device) {
    if (t == nullptr) {
        return;
    }
    SR_CHECK(t->defined() && t->dtype() == DType::kF32 && t->numel() == n,
             "{}: {} {} for {} values", op, name, t->defined() ? t->str() : "undefined", n);
    SR_CHECK(t->device() == device, "{}: {} {} is not on {}", op, name, t->str(), device.str());
}

// Host-readable segment arguments: a permutation of [0, S), sizes >= 0 summing to the bags.
void check_segments_on_host(const Tensor& permute, const Tensor& segment_sizes, int64_t bags) {
    const auto num_segments = static_cast<size_t>(permute.numel());
    const int64_t* perm = permute.data<int64_t>();
    std::vector<char> seen(num_segments, 0);
    for (size_t i = 0; i < num_segments; ++i) {
        const int64_t p = perm[i];
        SR_CHECK(p >= 0 && p < static_cast<int64_t>(num_segments) && !seen[p],
                 "permute_sparse_data: permute is not a permutation of [0, {}) (entry {})",
                 num_segments, p);
        seen[p] = 1;
    }
    const int64_t* sizes = segment_sizes.data<int64_t>();
    int64_t num_bags = 0;
    for (size_t k = 0; k < num_segments; ++k) {
        SR_CHECK(sizes[k] >= 0, "permute_sparse_data: negative segment size {}", sizes[k]);
        num_bags += sizes[k];
    }
    SR_CHECK(bags == num_bags, "permute_sparse_data: lengths [{}] for {} bags", bags, num_bags);
}

}  // namespace

void asynchronous_complete_cumsum(const Tensor& lengths, Tensor& out, Stream& stream) {
    const Device dev = lengths.device();
    check_i64_1d(lengths, "asynchronous_complete_cumsum", "lengths", dev);
    check_i64_1d(out, "asynchronous_complete_cumsum", "out", dev);
    SR_CHECK(out.numel() == lengths.numel() + 1,
             "asynchronous_complete_cumsum: out {} must have lengths' {} entries + 1", out.str(),
             lengths.numel());
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::asynchronous_complete_cumsum(lengths, out);
        case DeviceType::kCuda:
            return cuda::asynchronous_complete_cumsum(lengths, out, stream);
    }
}

void permute_sparse_data(const Tensor& permute,
                         const Tensor& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights,
                         Stream& stream) {
    const char* op = "permute_sparse_data";
    const Device dev = lengths.device();
    check_i64_1d(permute, op, "permute", dev);
    check_i64_1d(segment_sizes, op, "segment_sizes", dev);
    check_i64_1d(lengths, op, "lengths", dev);
    SR_CHECK(permute.numel() == segment_sizes.numel(),
             "permute_sparse_data: {} permute entries for {} segments", permute.numel(),
             segment_sizes.numel());
    if (dev.is_cpu()) {
        check_segments_on_host(permute, segment_sizes, lengths.numel());
    }
    SR_CHECK(values.defined() && values.dim() >= 1,
             "permute_sparse_data: values need a row dimension");
    SR_CHECK(values.device() == dev, "permute_sparse_data: values {} are not on {}", values.str(),
             dev.str());
    SR_CHECK(permuted_lengths.defined() && permuted_values.defined() &&
                 permuted_lengths.shape() == lengths.shape() &&
                 permuted_lengths.dtype() == DType::kI64 &&
                 permuted_values.shape() == values.shape() &&
                 permuted_values.dtype() == values.dtype(),
             "permute_sparse_data: outputs {} {} do not match inputs {} {}",
             permuted_lengths.defined() ? permuted_lengths.str() : "undefined",
             permuted_values.defined() ? permuted_values.str() : "undefined", lengths.str(),
             values.str());
    SR_CHECK(permuted_lengths.device() == dev && permuted_values.device() == dev,
             "permute_sparse_data: outputs {} {} are not on {}", permuted_lengths.str(),
             permuted_values.str(), dev.str());
    SR_CHECK((weights == nullptr) == (permuted_weights == nullptr),
             "permute_sparse_data: permuted_weights is needed exactly when weights is given");
    check_f32_rows(weights, op, "weights", values.size(0), dev);
    check_f32_rows(permuted_weights, op, "permuted_weights", values.size(0), dev);
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::permute_sparse_data(permute, segment_sizes, lengths, values, weights,
                                            permuted_lengths, permuted_values, permuted_weights);
        case DeviceType::kCuda:
            return cuda::permute_sparse_data(permute, segment_sizes, lengths, values, weights,
                                             permuted_lengths, permuted_values, permuted_weights,
                                             stream);
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
                                     Tensor* unbucketize_permute,
                                     Stream& stream) {
    const char* op = "block_bucketize_sparse_features";
    const Device dev = lengths.device();
    check_i64_1d(lengths, op, "lengths", dev);
    check_i64_1d(indices, op, "indices", dev);
    check_i64_1d(block_sizes, op, "block_sizes", dev);
    check_i64_1d(new_lengths, op, "new_lengths", dev);
    check_i64_1d(new_indices, op, "new_indices", dev);
    SR_CHECK(num_buckets >= 1, "block_bucketize_sparse_features: num_buckets {} < 1", num_buckets);
    const int64_t num_features = block_sizes.numel();
    SR_CHECK(num_features > 0 ? lengths.numel() % num_features == 0 : lengths.numel() == 0,
             "block_bucketize_sparse_features: lengths {} are not [F * B] for F = {}",
             lengths.str(), num_features);
    SR_CHECK(new_lengths.numel() == num_buckets * lengths.numel(),
             "block_bucketize_sparse_features: new_lengths {} must have {} buckets x {} bags",
             new_lengths.str(), num_buckets, lengths.numel());
    const int64_t n = indices.numel();
    SR_CHECK(new_indices.numel() == n, "block_bucketize_sparse_features: new_indices {} for {} ids",
             new_indices.str(), n);
    SR_CHECK((new_weights != nullptr) == (weights != nullptr || bucketize_pos),
             "block_bucketize_sparse_features: new_weights is needed exactly when weights or "
             "bucketize_pos is given");
    check_f32_rows(weights, op, "weights", n, dev);
    check_f32_rows(new_weights, op, "new_weights", n, dev);
    if (unbucketize_permute != nullptr) {
        check_i64_1d(*unbucketize_permute, op, "unbucketize_permute", dev);
        SR_CHECK(unbucketize_permute->numel() == n,
                 "block_bucketize_sparse_features: unbucketize_permute {} for {} ids",
                 unbucketize_permute->str(), n);
    }
    if (dev.is_cpu()) {
        const int64_t* bs = block_sizes.data<int64_t>();
        for (int64_t f = 0; f < num_features; ++f) {
            SR_CHECK(bs[f] >= 1, "block_bucketize_sparse_features: feature {} has block size {}", f,
                     bs[f]);
        }
    }
    switch (dev.type) {
        case DeviceType::kCpu:
            return cpu::block_bucketize_sparse_features(
                lengths, indices, block_sizes, num_buckets, weights, bucketize_pos, new_lengths,
                new_indices, new_weights, unbucketize_permute);
        case DeviceType::kCuda:
            return cuda::block_bucketize_sparse_features(
                lengths, indices, block_sizes, num_buckets, weights, bucketize_pos, new_lengths,
                new_indices, new_weights, unbucketize_permute, stream);
    }
}

}  // namespace shardrec::kernels
