#include "engine/distributed/bucketize.h"

#include "kernels/jagged.h"

namespace shardrec {
namespace {

void check_bucketize_args(const KeyedJaggedTensor& kjt,
                          int64_t num_buckets,
                          const std::vector<int64_t>& block_sizes) {
    SR_CHECK(kjt.values().device().is_cpu(), "bucketize_kjt_before_all2all needs host tensors");
    SR_CHECK(!kjt.variable_stride_per_key(),
             "bucketize_kjt_before_all2all: a variable stride per key (VBE) is not supported");
    SR_CHECK(num_buckets >= 1, "bucketize_kjt_before_all2all: num_buckets {} < 1", num_buckets);
    SR_CHECK(static_cast<int64_t>(block_sizes.size()) == kjt.num_keys(),
             "bucketize_kjt_before_all2all: {} block sizes for {} keys", block_sizes.size(),
             kjt.num_keys());
    for (size_t f = 0; f < block_sizes.size(); ++f) {
        SR_CHECK(block_sizes[f] >= 1, "bucketize_kjt_before_all2all: key '{}' has block size {}",
                 kjt.keys()[f], block_sizes[f]);
    }
}

// A new [n] tensor, or the first n elements of *buf (grown, with headroom, when n does not fit).
Tensor output_tensor(Tensor* buf, int64_t n, DType dtype) {
    if (buf == nullptr)
        return Tensor::empty({n}, dtype);
    if (!buf->defined() || buf->numel() < n)
        *buf = Tensor::empty({n + n / 2}, dtype);
    return buf->slice(0, n);
}

}  // namespace

BucketizedKJT bucketize_kjt_before_all2all(const KeyedJaggedTensor& kjt,
                                           int64_t num_buckets,
                                           const std::vector<int64_t>& block_sizes,
                                           bool output_permute,
                                           bool bucketize_pos,
                                           BucketizeBuffers* buffers) {
    check_bucketize_args(kjt, num_buckets, block_sizes);
    const int64_t num_ids = kjt.values().numel();
    BucketizedKJT out;
    out.features.lengths = output_tensor(buffers != nullptr ? &buffers->lengths : nullptr,
                                         num_buckets * kjt.num_keys() * kjt.stride(), DType::kI64);
    out.features.values =
        output_tensor(buffers != nullptr ? &buffers->values : nullptr, num_ids, DType::kI64);
    if (bucketize_pos || kjt.has_weights()) {
        out.features.weights =
            output_tensor(buffers != nullptr ? &buffers->weights : nullptr, num_ids, DType::kF32);
    }
    if (output_permute) {
        out.unbucketize_permute = Tensor::empty({num_ids}, DType::kI64);
    }
    // The block sizes wrapped as a host tensor (no copy); the CPU op does both passes.
    const Tensor block_sizes_t =
        Tensor::from_blob(const_cast<int64_t*>(block_sizes.data()),
                          {static_cast<int64_t>(block_sizes.size())}, DType::kI64);
    kernels::block_bucketize_sparse_features(
        kjt.lengths(), kjt.values(), block_sizes_t, num_buckets,
        kjt.has_weights() ? &kjt.weights() : nullptr, bucketize_pos, out.features.lengths,
        out.features.values, out.features.weights ? &*out.features.weights : nullptr,
        output_permute ? &*out.unbucketize_permute : nullptr, Stream::cpu());
    out.features.keys.reserve(static_cast<size_t>(num_buckets * kjt.num_keys()));
    for (int64_t bucket = 0; bucket < num_buckets; ++bucket) {
        out.features.keys.insert(out.features.keys.end(), kjt.keys().begin(), kjt.keys().end());
    }
    out.features.stride = kjt.stride();
    return out;
}

}  // namespace shardrec
