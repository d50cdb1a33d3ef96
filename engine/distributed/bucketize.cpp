#include "engine/distributed/bucketize.h"

#include <limits>

namespace shardrec {
namespace {

// The rule of the header, for one feature.
struct BucketRule {
    int64_t block = 1;
    int64_t num_buckets = 1;
    int64_t in_range_end = 0;  // block * num_buckets, saturated

    BucketRule(int64_t block_size, int64_t buckets)
        : block(block_size),
          num_buckets(buckets),
          in_range_end(block_size > std::numeric_limits<int64_t>::max() / buckets
                           ? std::numeric_limits<int64_t>::max()
                           : block_size * buckets) {}

    int64_t bucket(int64_t id) const { return id < in_range_end ? id / block : id % num_buckets; }

    int64_t new_id(int64_t id) const { return id < in_range_end ? id % block : id / num_buckets; }
};

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

// Pass 1: the bucketized lengths [bucket][f][b].
Tensor bucketized_lengths(const KeyedJaggedTensor& kjt,
                          int64_t num_buckets,
                          const std::vector<int64_t>& block_sizes,
                          Tensor* buf) {
    const int64_t batch = kjt.stride();
    const int64_t bags = kjt.num_keys() * batch;  // per bucket
    const int64_t* ids = kjt.values().data<int64_t>();
    const int64_t* off = kjt.offsets().data<int64_t>();
    Tensor lengths = output_tensor(buf, num_buckets * bags, DType::kI64);
    lengths.zero_();
    int64_t* len = lengths.data<int64_t>();
    for (int64_t f = 0; f < kjt.num_keys(); ++f) {
        const BucketRule rule(block_sizes[f], num_buckets);
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t bag = f * batch + b;
            for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
                SR_CHECK(ids[i] >= 0, "bucketize_kjt_before_all2all: key '{}' sample {} id {} < 0",
                         kjt.keys()[f], b, ids[i]);
                ++len[rule.bucket(ids[i]) * bags + bag];
            }
        }
    }
    return lengths;
}

// Pass 2: every id (and weight or position) to its bucketized position; perm may be null.
void scatter_to_buckets(const KeyedJaggedTensor& kjt,
                        int64_t num_buckets,
                        const std::vector<int64_t>& block_sizes,
                        const Tensor& lengths,
                        bool bucketize_pos,
                        int64_t* v_out,
                        float* w_out,
                        int64_t* perm) {
    const int64_t batch = kjt.stride();
    const int64_t bags = kjt.num_keys() * batch;
    const int64_t* ids = kjt.values().data<int64_t>();
    const int64_t* off = kjt.offsets().data<int64_t>();
    const float* w_in = kjt.has_weights() ? kjt.weights().data<float>() : nullptr;
    // cursor[k]: the next free position of bucketized bag k.
    const int64_t* len = lengths.data<int64_t>();
    std::vector<int64_t> cursor(static_cast<size_t>(lengths.numel()));
    int64_t at = 0;
    for (size_t k = 0; k < cursor.size(); ++k) {
        cursor[k] = at;
        at += len[k];
    }
    for (int64_t f = 0; f < kjt.num_keys(); ++f) {
        const BucketRule rule(block_sizes[f], num_buckets);
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t bag = f * batch + b;
            for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
                const int64_t pos = cursor[rule.bucket(ids[i]) * bags + bag]++;
                v_out[pos] = rule.new_id(ids[i]);
                if (bucketize_pos) {
                    w_out[pos] = static_cast<float>(i - off[bag]);
                } else if (w_in != nullptr) {
                    w_out[pos] = w_in[i];
                }
                if (perm != nullptr) {
                    perm[i] = pos;
                }
            }
        }
    }
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
    out.features.lengths = bucketized_lengths(kjt, num_buckets, block_sizes,
                                              buffers != nullptr ? &buffers->lengths : nullptr);
    out.features.values =
        output_tensor(buffers != nullptr ? &buffers->values : nullptr, num_ids, DType::kI64);
    if (bucketize_pos || kjt.has_weights()) {
        out.features.weights =
            output_tensor(buffers != nullptr ? &buffers->weights : nullptr, num_ids, DType::kF32);
    }
    if (output_permute) {
        out.unbucketize_permute = Tensor::empty({num_ids}, DType::kI64);
    }
    scatter_to_buckets(kjt, num_buckets, block_sizes, out.features.lengths, bucketize_pos,
                       out.features.values.data<int64_t>(),
                       out.features.weights ? out.features.weights->data<float>() : nullptr,
                       output_permute ? out.unbucketize_permute->data<int64_t>() : nullptr);
    out.features.keys.reserve(static_cast<size_t>(num_buckets * kjt.num_keys()));
    for (int64_t bucket = 0; bucket < num_buckets; ++bucket) {
        out.features.keys.insert(out.features.keys.end(), kjt.keys().begin(), kjt.keys().end());
    }
    out.features.stride = kjt.stride();
    return out;
}

}  // namespace shardrec
