// The DLRM interaction archs (TorchRec torchrec.models.dlrm): InteractionArch, the pairwise dot
// interaction of the dense vector with the F pooled embeddings (kernels/dot_interaction.h), and
// InteractionDCNArch (DLRM_DCN / MLPerf DLRM-DCNv2), a LowRankCrossNet over concat(dense,
// pooled). Both take the dense arch output [B, D] and a KeyedTensor's values [B, F * D] (every
// feature with the same dim D), and give the gradients wrt both after backward.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/modules/crossnet.h"
#include "engine/modules/module.h"

namespace shardrec {

// dst[:, col : col + src.size(1)] = src for 2-D tensors of one dtype with the same rows (concat
// along dim 1), and its inverse dst = src[:, col : col + dst.size(1)]: one pitched copy in
// `stream`'s order (any devices).
void copy_into_columns(Tensor& dst, int64_t col, const Tensor& src, Stream& stream);
void copy_from_columns(Tensor& dst, const Tensor& src, int64_t col, Stream& stream);

class InteractionArch : public Module {
public:
    InteractionArch(int64_t num_sparse_features, int64_t embedding_dim);

    int64_t out_features() const { return D_ + (F_ + 1) * F_ / 2; }

    // dense [B, D], sparse [B, F * D] -> [B, D + F(F+1)/2]: dense, then the dots T_i . T_j
    // (i > j, T_0 = dense) in dlrm's row-major lower-triangle order. Both inputs must stay
    // unchanged until backward (their handles are kept, not copied).
    const Tensor& forward(const Tensor& dense,
                          const Tensor& sparse,
                          Stream& stream = Stream::cpu());
    // grad_out [B, D + F(F+1)/2]; the results are read through grad_dense() / grad_sparse().
    void backward(const Tensor& grad_out, Stream& stream = Stream::cpu());

    const Tensor& grad_dense() const { return grad_dense_; }  // [B, D]

    const Tensor& grad_sparse() const { return grad_sparse_; }  // [B, F * D]

private:
    int64_t F_, D_;
    Tensor dense_, sparse_;  // handles to the latest forward's inputs
    Tensor out_, grad_dense_, grad_sparse_;
};

class InteractionDCNArch : public Module {
public:
    // The cross net is LowRankCrossNet(crossnet_name, D * (F + 1), num_layers, low_rank, seed);
    // DLRM_DCN names it "inter_arch.crossnet".
    InteractionDCNArch(const std::string& crossnet_name,
                       int64_t num_sparse_features,
                       int64_t embedding_dim,
                       int64_t num_layers,
                       int64_t low_rank,
                       uint64_t seed);

    std::vector<Parameter*> parameters() override { return crossnet_->parameters(); }

    int64_t out_features() const { return D_ * (F_ + 1); }

    // dense [B, D], sparse [B, F * D] -> crossnet(concat(dense, sparse)) [B, D * (F + 1)].
    const Tensor& forward(const Tensor& dense,
                          const Tensor& sparse,
                          Stream& stream = Stream::cpu());
    void backward(const Tensor& grad_out, Stream& stream = Stream::cpu());

    const Tensor& grad_dense() const { return grad_dense_; }  // [B, D]

    const Tensor& grad_sparse() const { return grad_sparse_; }  // [B, F * D]

    LowRankCrossNet& crossnet() { return *crossnet_; }

private:
    int64_t F_, D_;
    std::unique_ptr<LowRankCrossNet> crossnet_;
    Tensor combined_, grad_dense_, grad_sparse_;
};

}  // namespace shardrec
