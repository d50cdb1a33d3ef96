// EmbeddingCollection: one table-batched group, packed KJT keys, sequence lookup and fused
// backward (see the header).
#include "engine/modules/embedding_collection.h"

#include <algorithm>
#include <cstring>

namespace shardrec {

EmbeddingCollection::EmbeddingCollection(std::vector<EmbeddingConfig> tables,
                                         uint64_t seed,
                                         kernels::FusedOptimizerParams fused_optimizer,
                                         Device device)
    : tables_(std::move(tables)), optim_(fused_optimizer) {
    SR_CHECK(device.is_cpu(), "EmbeddingCollection: only the cpu device is built, got {}",
             device.str());
    SR_CHECK(optim_.step >= 1, "fused optimizer step must be >= 1");
    std::vector<int32_t> feature_table;
    for (int64_t t : check_sequence_tables("EmbeddingCollection", tables_))
        feature_table.push_back(static_cast<int32_t>(t));
    dim_ = tables_[0].embedding_dim;
    table_row_offsets_ = {0};
    for (const EmbeddingConfig& c : tables_) {
        names_.insert(names_.end(), c.feature_names.begin(), c.feature_names.end());
        table_row_offsets_.push_back(table_row_offsets_.back() + c.num_embeddings);
    }
    const int64_t rows = table_row_offsets_.back();
    weights_ = Tensor::empty({rows, dim_}, tables_[0].data_type);
    for (size_t t = 0; t < tables_.size(); ++t) {
        Tensor view = weights_.slice(table_row_offsets_[t], table_row_offsets_[t + 1]);
        init_embedding_rows(view, seed, static_cast<int64_t>(t), 0, 0, tables_[t].num_embeddings);
    }
    table_offsets_ = Tensor::from_vector(table_row_offsets_);
    feature_table_ = Tensor::from_vector(feature_table);
    kernels::make_optimizer_states(optim_, rows, dim_, state1_, state2_);
    packer_ = KjtFeaturePacker("EmbeddingCollection", names_);
}

std::vector<std::pair<std::string, JaggedTensor>> EmbeddingCollection::forward(
    const KeyedJaggedTensor& features, Stream& stream) {
    packer_.pack(features, false);
    const int64_t num_ids = packer_.ids().numel();
    out_ = grow_prefix(out_buffer_, num_ids * dim_, DType::kF32).view({num_ids, dim_});
    kernels::sequence_embedding_forward(weights_, table_offsets_, feature_table_, packer_.ids(),
                                        packer_.offsets(), out_, stream);
    std::vector<std::pair<std::string, JaggedTensor>> result;
    const int64_t batch = packer_.batch();
    for (size_t i = 0; i < names_.size(); ++i) {
        const int64_t begin = packer_.packed_begin(i);
        Tensor lengths = features.lengths().slice(packer_.kjt_lengths_begin(i),
                                                  packer_.kjt_lengths_begin(i) + batch);
        result.emplace_back(names_[i], JaggedTensor::from_lengths(
                                           out_.slice(begin, begin + packer_.count(i)), lengths));
    }
    return result;
}

void EmbeddingCollection::backward(const std::vector<std::pair<std::string, Tensor>>& grads,
                                   Stream& stream) {
    SR_CHECK(out_.defined(), "EmbeddingCollection::backward before any forward");
    SR_CHECK(grads.size() == names_.size(),
             "EmbeddingCollection::backward: {} gradients for {} "
             "features",
             grads.size(), names_.size());
    const int64_t num_ids = out_.size(0);
    Tensor grad = grow_prefix(grad_buffer_, num_ids * dim_, DType::kF32).view({num_ids, dim_});
    for (size_t i = 0; i < names_.size(); ++i) {
        const auto it = std::find_if(grads.begin(), grads.end(),
                                     [&](const auto& kv) { return kv.first == names_[i]; });
        SR_CHECK(it != grads.end(), "EmbeddingCollection::backward: no gradient for feature '{}'",
                 names_[i]);
        const Tensor& g = it->second;
        SR_CHECK(g.dtype() == DType::kF32 && g.shape() == Shape({packer_.count(i), dim_}),
                 "EmbeddingCollection::backward: feature '{}' needs f32[{}, {}], got {}", names_[i],
                 packer_.count(i), dim_, g.str());
        std::memcpy(grad.data<float>() + packer_.packed_begin(i) * dim_, g.data<float>(),
                    g.nbytes());
    }
    kernels::sequence_embedding_backward_fused(
        grad, table_offsets_, feature_table_, packer_.ids(), packer_.offsets(), optim_, weights_,
        state1_.defined() ? &state1_ : nullptr, state2_.defined() ? &state2_ : nullptr, workspace_,
        stream);
    ++optim_.step;
}

void EmbeddingCollection::set_optimizer_step(int64_t step) {
    SR_CHECK(step >= 1, "set_optimizer_step({}): step must be >= 1", step);
    optim_.step = step;
}

Tensor EmbeddingCollection::weight(int64_t table) const {
    SR_CHECK(table >= 0 && table < static_cast<int64_t>(tables_.size()), "no table {}", table);
    return weights_.slice(table_row_offsets_[static_cast<size_t>(table)],
                          table_row_offsets_[static_cast<size_t>(table) + 1]);
}

std::vector<Tensor> EmbeddingCollection::optimizer_state(int64_t table) const {
    SR_CHECK(table >= 0 && table < static_cast<int64_t>(tables_.size()), "no table {}", table);
    const int64_t begin = table_row_offsets_[static_cast<size_t>(table)];
    const int64_t end = table_row_offsets_[static_cast<size_t>(table) + 1];
    std::vector<Tensor> state;
    if (state1_.defined()) {
        state.push_back(state1_.slice(begin, end));
    }
    if (state2_.defined()) {
        state.push_back(state2_.slice(begin, end));
    }
    return state;
}

int64_t EmbeddingCollection::optimizer_state_bytes() const {
    return static_cast<int64_t>((state1_.defined() ? state1_.nbytes() : 0) +
                                (state2_.defined() ? state2_.nbytes() : 0));
}

}  // namespace shardrec
