#include "engine/modules/interaction.h"

#include "engine/modules/init.h"
#include "kernels/dot_interaction.h"

namespace shardrec {
namespace {

void check_pair(const Tensor& dense, const Tensor& sparse, int64_t F, int64_t D) {
    SR_CHECK(dense.dim() == 2 && dense.size(1) == D, "interaction: dense must be [B, {}], got {}",
             D, dense.str());
    SR_CHECK(sparse.dim() == 2 && sparse.size(0) == dense.size(0) && sparse.size(1) == F * D,
             "interaction: sparse must be [{}, {}], got {}", dense.size(0), F * D, sparse.str());
}

}  // namespace

void copy_into_columns(Tensor& dst, int64_t col, const Tensor& src, Stream& stream) {
    SR_CHECK(dst.dim() == 2 && src.dim() == 2 && dst.size(0) == src.size(0) && col >= 0 &&
                 col + src.size(1) <= dst.size(1) && dst.dtype() == src.dtype(),
             "copy_into_columns: {} into {} at column {}", src.str(), dst.str(), col);
    const size_t es = dtype_size(dst.dtype());
    const auto dw = static_cast<size_t>(dst.size(1)), sw = static_cast<size_t>(src.size(1));
    copy_2d_async(static_cast<char*>(dst.data_ptr()) + static_cast<size_t>(col) * es, dw * es,
                  dst.device(), src.data_ptr(), sw * es, src.device(), sw * es,
                  static_cast<size_t>(dst.size(0)), stream);
}

void copy_from_columns(Tensor& dst, const Tensor& src, int64_t col, Stream& stream) {
    SR_CHECK(dst.dim() == 2 && src.dim() == 2 && dst.size(0) == src.size(0) && col >= 0 &&
                 col + dst.size(1) <= src.size(1) && dst.dtype() == src.dtype(),
             "copy_from_columns: {} from {} at column {}", dst.str(), src.str(), col);
    const size_t es = dtype_size(dst.dtype());
    const auto dw = static_cast<size_t>(dst.size(1)), sw = static_cast<size_t>(src.size(1));
    copy_2d_async(dst.data_ptr(), dw * es, dst.device(),
                  static_cast<const char*>(src.data_ptr()) + static_cast<size_t>(col) * es, sw * es,
                  src.device(), dw * es, static_cast<size_t>(dst.size(0)), stream);
}

// ---- InteractionArch ----

InteractionArch::InteractionArch(int64_t num_sparse_features, int64_t embedding_dim)
    : F_(num_sparse_features), D_(embedding_dim) {
    SR_CHECK(F_ >= 0 && D_ >= 1, "InteractionArch(F={}, D={})", F_, D_);
}

const Tensor& InteractionArch::forward(const Tensor& dense, const Tensor& sparse, Stream& stream) {
    check_pair(dense, sparse, F_, D_);
    dense_ = dense;
    sparse_ = sparse;
    init::reuse_or_allocate(out_, {dense.size(0), out_features()}, dense.device());
    kernels::dot_interaction_forward(dense, sparse, out_, stream);
    return out_;
}

void InteractionArch::backward(const Tensor& grad_out, Stream& stream) {
    SR_CHECK(dense_.defined(), "InteractionArch: backward before forward");
    init::reuse_or_allocate(grad_dense_, dense_.shape(), dense_.device());
    init::reuse_or_allocate(grad_sparse_, sparse_.shape(), sparse_.device());
    kernels::dot_interaction_backward(dense_, sparse_, grad_out, grad_dense_, grad_sparse_, stream);
}

// ---- InteractionDCNArch ----

InteractionDCNArch::InteractionDCNArch(const std::string& crossnet_name,
                                       int64_t num_sparse_features,
                                       int64_t embedding_dim,
                                       int64_t num_layers,
                                       int64_t low_rank,
                                       uint64_t seed)
    : F_(num_sparse_features), D_(embedding_dim) {
    SR_CHECK(F_ >= 0 && D_ >= 1, "InteractionDCNArch(F={}, D={})", F_, D_);
    crossnet_ = std::make_unique<LowRankCrossNet>(crossnet_name, out_features(), num_layers,
                                                  low_rank, seed);
}

const Tensor& InteractionDCNArch::forward(const Tensor& dense,
                                          const Tensor& sparse,
                                          Stream& stream) {
    check_pair(dense, sparse, F_, D_);
    init::reuse_or_allocate(combined_, {dense.size(0), out_features()}, dense.device());
    copy_into_columns(combined_, 0, dense, stream);
    copy_into_columns(combined_, D_, sparse, stream);
    return crossnet_->forward(combined_, stream);
}

void InteractionDCNArch::backward(const Tensor& grad_out, Stream& stream) {
    const Tensor& g = crossnet_->backward(grad_out, stream);
    const int64_t B = g.size(0);
    copy_from_columns(init::reuse_or_allocate(grad_dense_, {B, D_}, g.device()), g, 0, stream);
    copy_from_columns(init::reuse_or_allocate(grad_sparse_, {B, F_ * D_}, g.device()), g, D_,
                      stream);
}

}  // namespace shardrec
