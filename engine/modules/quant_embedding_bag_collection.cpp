#include "engine/modules/quant_embedding_bag_collection.h"

#include <chrono>
#include <cstring>
#include <optional>

#include "engine/core/error.h"

namespace shardrec {

QuantEmbeddingBagCollection::QuantEmbeddingBagCollection(std::vector<QuantTable> tables,
                                                         bool is_weighted)
    : tables_(std::move(tables)), is_weighted_(is_weighted) {
    SR_CHECK(!tables_.empty(), "QuantEmbeddingBagCollection needs at least one table");
    std::vector<EmbeddingBagConfig> configs;
    for (const QuantTable& q : tables_)
        configs.push_back(q.config);
    position_weighted_ = make_position_weighted_module(configs);
    lookup_weighted_ = is_weighted_ || position_weighted_ != nullptr;
    std::vector<int64_t> feature_table_index;
    for (size_t t = 0; t < tables_.size(); ++t) {
        const QuantTable& q = tables_[t];
        const EmbeddingBagConfig& c = q.config;
        const int64_t row_bytes = kernels::quant_row_bytes(q.type, c.embedding_dim);
        SR_CHECK(q.rows.defined() && q.rows.dtype() == DType::kU8 &&
                     q.rows.numel() == c.num_embeddings * row_bytes,
                 "QuantEmbeddingBagCollection: table '{}' needs {} x {} bytes of {} rows", c.name,
                 c.num_embeddings, row_bytes, kernels::quant_type_name(q.type));
        for (const std::string& f : c.feature_names) {
            names_.push_back(f);
            dims_.push_back(c.embedding_dim);
            columns_.push_back(sum_dims_);
            sum_dims_ += c.embedding_dim;
            feature_table_index.push_back(static_cast<int64_t>(t));
        }
    }
    for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
        Group g;
        g.pooling = mode;
        for (size_t t = 0; t < tables_.size(); ++t) {
            if (tables_[t].config.pooling == mode)
                g.tables.push_back(t);
        }
        if (g.tables.empty())
            continue;
        const auto T = static_cast<int64_t>(g.tables.size());
        g.weights_offsets = Tensor::empty({T + 1}, DType::kI64);
        g.weights_tys = Tensor::empty({T}, DType::kU8);
        g.D_offsets = Tensor::empty({T + 1}, DType::kI32);
        int64_t bytes = 0;
        g.weights_offsets.data<int64_t>()[0] = 0;
        g.D_offsets.data<int32_t>()[0] = 0;
        for (int64_t i = 0; i < T; ++i) {
            const QuantTable& q = tables_[g.tables[static_cast<size_t>(i)]];
            bytes += q.rows.numel();
            g.weights_offsets.data<int64_t>()[i + 1] = bytes;
            g.weights_tys.data<uint8_t>()[i] = static_cast<uint8_t>(q.type);
            g.D_offsets.data<int32_t>()[i + 1] =
                g.D_offsets.data<int32_t>()[i] + static_cast<int32_t>(q.config.embedding_dim);
        }
        // One buffer per group, as FBGEMM's TBE holds its tables: the kernel addresses tables by
        // byte offset. The stored rows are copied once here, unchanged.
        g.weights = Tensor::empty({bytes}, DType::kU8);
        for (int64_t i = 0; i < T; ++i) {
            const QuantTable& q = tables_[g.tables[static_cast<size_t>(i)]];
            std::memcpy(g.weights.data<uint8_t>() + g.weights_offsets.data<int64_t>()[i],
                        q.rows.data<uint8_t>(), static_cast<size_t>(q.rows.numel()));
        }
        std::vector<std::string> group_names;
        std::vector<int32_t> feature_table;
        for (size_t f = 0; f < names_.size(); ++f) {
            const auto table = static_cast<size_t>(feature_table_index[f]);
            for (int64_t i = 0; i < T; ++i) {
                if (g.tables[static_cast<size_t>(i)] != table)
                    continue;
                g.features.push_back(static_cast<int64_t>(f));
                group_names.push_back(names_[f]);
                feature_table.push_back(static_cast<int32_t>(i));
                g.row_bytes.push_back(kernels::quant_row_bytes(
                    tables_[table].type, tables_[table].config.embedding_dim));
            }
        }
        g.feature_table = Tensor::from_vector(feature_table);
        g.packer = KjtFeaturePacker("QuantEmbeddingBagCollection", group_names);
        groups_.push_back(std::move(g));
    }
    // The stored rows now live in the group buffers.
    for (QuantTable& q : tables_)
        q.rows = Tensor();
}

KeyedTensor QuantEmbeddingBagCollection::forward(const KeyedJaggedTensor& input, Stream& stream) {
    if (is_weighted_) {
        SR_CHECK(input.has_weights(),
                 "QuantEmbeddingBagCollection: the collection is weighted but the KJT has no "
                 "weights");
    }
    const auto start = std::chrono::steady_clock::now();
    std::optional<KeyedJaggedTensor> weighted;
    if (position_weighted_)
        weighted.emplace(position_weighted_->forward(input));
    const KeyedJaggedTensor& features = weighted ? *weighted : input;
    const int64_t batch = features.stride();
    if (!values_.defined() || values_.size(0) != batch)
        values_ = Tensor::empty({batch, sum_dims_}, DType::kF32);
    for (Group& g : groups_) {
        g.packer.pack(features, lookup_weighted_);
        int64_t cols = 0;
        for (int64_t f : g.features)
            cols += dims_[static_cast<size_t>(f)];
        const bool direct = groups_.size() == 1;  // one mode: the group's columns are all of them
        if (direct) {
            g.out = values_;
        } else if (!g.out.defined() || g.out.size(0) != batch) {
            g.out = Tensor::empty({batch, cols}, DType::kF32);
        }
        const Tensor psw = lookup_weighted_ ? g.packer.weights() : Tensor();
        kernels::quant_embedding_bag_forward(g.weights, g.weights_offsets, g.weights_tys,
                                             g.D_offsets, g.feature_table, g.packer.ids(),
                                             g.packer.offsets(), lookup_weighted_ ? &psw : nullptr,
                                             g.pooling, g.out, stream);
        for (size_t i = 0; i < g.features.size(); ++i)
            bytes_read_ += g.packer.count(i) * (g.row_bytes[i] + 8);
        if (direct)
            continue;
        int64_t col = 0;
        for (int64_t f : g.features) {
            const int64_t d = dims_[static_cast<size_t>(f)];
            const int64_t dst = columns_[static_cast<size_t>(f)];
            for (int64_t b = 0; b < batch; ++b) {
                std::memcpy(values_.data<float>() + b * sum_dims_ + dst,
                            g.out.data<float>() + b * cols + col,
                            static_cast<size_t>(d) * sizeof(float));
            }
            col += d;
        }
    }
    lookup_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return KeyedTensor(names_, dims_, values_);
}

std::vector<Parameter*> QuantEmbeddingBagCollection::parameters() {
    return position_weighted_ ? position_weighted_->parameters() : std::vector<Parameter*>{};
}

void QuantEmbeddingBagCollection::backward(const Tensor&, Stream&) {
    SR_CHECK(false, "QuantEmbeddingBagCollection is for inference: it has no backward");
}

int64_t QuantEmbeddingBagCollection::parameter_bytes() const {
    int64_t bytes = 0;
    for (const Group& g : groups_)
        bytes += g.weights.numel();
    return bytes;
}

}  // namespace shardrec
