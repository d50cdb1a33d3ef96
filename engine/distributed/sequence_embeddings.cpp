#include "engine/distributed/sequence_embeddings.h"

#include <cstring>
#include <numeric>
#include <utility>

#include "engine/distributed/permute_sparse_data.h"

namespace shardrec {
namespace {

int64_t sum_of(const std::vector<int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), int64_t{0});
}

std::vector<int64_t> scaled(const std::vector<int64_t>& v, int64_t factor) {
    std::vector<int64_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        out[i] = v[i] * factor;
    }
    return out;
}

// Segment sizes and the recat between the [feature][rank] layout (the KJTAllToAll output) and
// the [rank][feature] layout (what goes to each rank), each segment one rank's batch.
struct SequenceRecat {
    std::vector<int64_t> feature_major_sizes;  // segment f * world + s: B_s
    std::vector<int64_t> rank_major_sizes;     // segment s * F + f: B_s
    std::vector<int64_t> to_rank_major;        // output [s][f] <- input f * world + s
    std::vector<int64_t> to_feature_major;     // output [f][s] <- input s * F + f

    SequenceRecat(int64_t num_features, const std::vector<int64_t>& batch_per_rank) {
        const auto world = static_cast<int64_t>(batch_per_rank.size());
        for (int64_t f = 0; f < num_features; ++f) {
            for (int64_t s = 0; s < world; ++s) {
                feature_major_sizes.push_back(batch_per_rank[s]);
                to_feature_major.push_back(s * num_features + f);
            }
        }
        for (int64_t s = 0; s < world; ++s) {
            for (int64_t f = 0; f < num_features; ++f) {
                rank_major_sizes.push_back(batch_per_rank[s]);
                to_rank_major.push_back(f * world + s);
            }
        }
    }
};

void check_rows(const Tensor& t, int64_t rows, int64_t dim, const char* what) {
    SR_CHECK(t.defined() && t.device().is_cpu() && t.dtype() == DType::kF32 && t.dim() == 2 &&
                 t.size(0) == rows && (dim < 0 || t.size(1) == dim),
             "{}: needs host f32 [{}, {}], got {}", what, rows, dim,
             t.defined() ? t.str() : "undefined");
}

void check_permutation(const Tensor& perm, int64_t n) {
    SR_CHECK(perm.device().is_cpu() && perm.dtype() == DType::kI64 && perm.numel() == n,
             "SequenceEmbeddingsAllToAll: unbucketize_permute {} for {} ids", perm.str(), n);
    std::vector<char> seen(static_cast<size_t>(n), 0);
    const int64_t* p = perm.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
        SR_CHECK(p[i] >= 0 && p[i] < n && !seen[p[i]],
                 "SequenceEmbeddingsAllToAll: unbucketize_permute is not a permutation "
                 "(entry {} is {})",
                 i, p[i]);
        seen[p[i]] = 1;
    }
}

// dst row i = src row perm[i] (gather), or dst row perm[i] = src row i (scatter).
void permute_rows(const Tensor& src, const Tensor& perm, bool scatter, Tensor& dst) {
    const int64_t rows = src.size(0);
    const int64_t dim = src.size(1);
    const int64_t* p = perm.data<int64_t>();
    const float* s = src.data<float>();
    float* d = dst.data<float>();
    for (int64_t i = 0; dim > 0 && i < rows; ++i) {
        const int64_t from = scatter ? i : p[i];
        const int64_t to = scatter ? p[i] : i;
        std::memcpy(d + to * dim, s + from * dim, sizeof(float) * dim);
    }
}

}  // namespace

SequenceEmbeddingsAllToAll::SequenceEmbeddingsAllToAll(std::shared_ptr<comm::ProcessGroup> pg,
                                                       std::vector<int64_t> features_per_rank)
    : pg_(std::move(pg)), features_per_rank_(std::move(features_per_rank)) {
    SR_CHECK(pg_ != nullptr, "SequenceEmbeddingsAllToAll: null process group");
    SR_CHECK(static_cast<int64_t>(features_per_rank_.size()) == pg_->size(),
             "SequenceEmbeddingsAllToAll: {} feature counts for a group of {} ranks",
             features_per_rank_.size(), pg_->size());
}

TensorAwaitable SequenceEmbeddingsAllToAll::start_forward(const Tensor& local_embs,
                                                          const Tensor& lengths,
                                                          const KJTAllToAllSplits& splits,
                                                          const Tensor* unbucketize_permute) {
    const int64_t world = pg_->size();
    SR_CHECK(static_cast<int64_t>(splits.stride_per_rank.size()) == world &&
                 static_cast<int64_t>(splits.values_input_splits.size()) == world &&
                 static_cast<int64_t>(splits.values_output_splits.size()) == world,
             "SequenceEmbeddingsAllToAll: splits are not for a group of {} ranks", world);
    const int64_t num_features = features_per_rank_[pg_->rank()];
    const int64_t n_local = sum_of(splits.values_output_splits);
    const int64_t n_in = sum_of(splits.values_input_splits);
    check_rows(local_embs, n_local, -1, "SequenceEmbeddingsAllToAll::forward local_embs");
    SR_CHECK(lengths.dtype() == DType::kI64 &&
                 lengths.numel() == num_features * sum_of(splits.stride_per_rank),
             "SequenceEmbeddingsAllToAll::forward: lengths {} for {} keys x batch {}",
             lengths.str(), num_features, sum_of(splits.stride_per_rank));
    splits_ = splits;
    dim_ = local_embs.size(1);
    unbucketize_permute_.reset();
    if (unbucketize_permute != nullptr) {
        check_permutation(*unbucketize_permute, n_in);
        unbucketize_permute_ = *unbucketize_permute;
    }

    // TorchRec forward_recat: [feature][rank] -> [rank][feature], so each rank's rows are
    // contiguous (values_output_splits[s] of them for rank s).
    const SequenceRecat recat(num_features, splits.stride_per_rank);
    permuted_lengths_ =
        reuse_buffer(lengths_buf_, 1, lengths.numel(), DType::kI64).view({lengths.numel()});
    Tensor send = reuse_buffer(send_, n_local, dim_, DType::kF32);
    permute_sparse_data(recat.to_rank_major, recat.feature_major_sizes,
                        lengths.view({lengths.numel()}), local_embs, nullptr, permuted_lengths_,
                        send, nullptr);
    Tensor recv = reuse_buffer(recv_, n_in, dim_, DType::kF32);
    std::vector<comm::Work> works;
    works.push_back(pg_->all_to_all_v(send, scaled(splits.values_output_splits, dim_), recv,
                                      scaled(splits.values_input_splits, dim_)));
    Tensor out = unbucketize_permute_ ? reuse_buffer(out_, n_in, dim_, DType::kF32) : recv;
    auto finish = [send, recv, out, perm = unbucketize_permute_]() mutable {
        if (perm) {
            permute_rows(recv, *perm, /*scatter=*/false, out);  // TorchRec index_select
        }
        return out;
    };
    return TensorAwaitable(std::move(works), std::move(finish));
}

Tensor SequenceEmbeddingsAllToAll::forward(const Tensor& local_embs,
                                           const Tensor& lengths,
                                           const KJTAllToAllSplits& splits,
                                           const Tensor* unbucketize_permute) {
    return start_forward(local_embs, lengths, splits, unbucketize_permute).wait();
}

TensorAwaitable SequenceEmbeddingsAllToAll::start_backward(const Tensor& grad_output) {
    SR_CHECK(dim_ >= 0, "SequenceEmbeddingsAllToAll::backward before forward");
    const int64_t world = pg_->size();
    const int64_t n_local = sum_of(splits_.values_output_splits);
    const int64_t n_in = sum_of(splits_.values_input_splits);
    check_rows(grad_output, n_in, dim_, "SequenceEmbeddingsAllToAll::backward grad_output");
    Tensor send = grad_output;
    if (unbucketize_permute_) {  // the adjoint of index_select: rows back to bucketized order
        send = reuse_buffer(grad_send_, n_in, dim_, DType::kF32);
        permute_rows(grad_output, *unbucketize_permute_, /*scatter=*/true, send);
    }
    Tensor recv = reuse_buffer(grad_recv_, n_local, dim_, DType::kF32);
    std::vector<comm::Work> works;
    works.push_back(pg_->all_to_all_v(send, scaled(splits_.values_input_splits, dim_), recv,
                                      scaled(splits_.values_output_splits, dim_)));
    const int64_t num_features = features_per_rank_[pg_->rank()];
    Tensor scratch_lengths =
        reuse_buffer(grad_lengths_buf_, 1, permuted_lengths_.numel(), DType::kI64)
            .view({permuted_lengths_.numel()});
    Tensor grad_in = reuse_buffer(grad_in_, n_local, dim_, DType::kF32);
    const bool divide = gradient_division();
    auto finish = [send, recv, scratch_lengths, grad_in, divide, world, num_features,
                   lengths = permuted_lengths_, batch = splits_.stride_per_rank]() mutable {
        // TorchRec backward_recat: [rank][feature] -> [feature][rank].
        const SequenceRecat recat(num_features, batch);
        permute_sparse_data(recat.to_feature_major, recat.rank_major_sizes, lengths, recv, nullptr,
                            scratch_lengths, grad_in, nullptr);
        if (divide) {
            divide_by_world(grad_in, world);
        }
        return grad_in;
    };
    return TensorAwaitable(std::move(works), std::move(finish));
}

Tensor SequenceEmbeddingsAllToAll::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

}  // namespace shardrec
