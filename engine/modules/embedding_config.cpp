// Embedding table configs: row initialisation, table rules and KJT packing (see
// embedding_config.h).
#include "engine/modules/embedding_config.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "kernels/embedding_init.h"

namespace shardrec {

void init_embedding_rows(Tensor& rows,
                         uint64_t seed,
                         int64_t table_index,
                         int64_t row_begin,
                         int64_t col_begin,
                         int64_t num_embeddings) {
    Stream stream(rows.device());  // on the CPU a no-op stream
    kernels::embedding_init(rows, seed, table_index, row_begin, col_begin, num_embeddings, stream);
    stream.synchronize();
}

std::vector<int64_t> check_sequence_tables(const std::string& module,
                                           const std::vector<EmbeddingConfig>& tables) {
    SR_CHECK(!tables.empty(), "{} needs at least one table", module);
    std::set<std::string> seen_tables, seen_features;
    std::vector<int64_t> feature_table;
    for (size_t t = 0; t < tables.size(); ++t) {
        const EmbeddingConfig& c = tables[t];
        SR_CHECK(seen_tables.insert(c.name).second, "table name '{}' appears twice", c.name);
        SR_CHECK(c.num_embeddings > 0 && c.embedding_dim > 0 && !c.feature_names.empty(),
                 "table '{}': needs num_embeddings > 0, embedding_dim > 0 and feature_names",
                 c.name);
        SR_CHECK(c.embedding_dim == tables[0].embedding_dim && c.data_type == tables[0].data_type,
                 "{}: table '{}' has dim {} {}, table '{}' dim {} {}; all tables must share "
                 "embedding_dim and data_type",
                 module, c.name, c.embedding_dim, dtype_name(c.data_type), tables[0].name,
                 tables[0].embedding_dim, dtype_name(tables[0].data_type));
        for (const std::string& f : c.feature_names) {
            SR_CHECK(seen_features.insert(f).second, "feature '{}' is listed twice", f);
            feature_table.push_back(static_cast<int64_t>(t));
        }
    }
    return feature_table;
}

// ---- KJT packing ----

KjtFeaturePacker::KjtFeaturePacker(std::string module, std::vector<std::string> feature_names)
    : module_(std::move(module)),
      names_(std::move(feature_names)),
      packed_begin_(names_.size()),
      kjt_begin_(names_.size()),
      count_(names_.size()),
      kjt_lengths_(names_.size()) {}

void KjtFeaturePacker::pack(const KeyedJaggedTensor& kjt, bool weighted) {
    SR_CHECK(!kjt.variable_stride_per_key(),
             "{}: a KJT with a variable batch per key is not "
             "supported",
             module_);
    SR_CHECK(kjt.values().device().is_cpu(), "{}: the KJT must be on the cpu", module_);
    SR_CHECK(!weighted || kjt.has_weights(), "{} is weighted but the KJT has no weights", module_);
    const std::vector<std::string>& keys = kjt.keys();
    batch_ = kjt.stride();
    direct_ = keys.size() == names_.size();
    for (size_t i = 0; i < names_.size(); ++i) {
        const auto it = std::find(keys.begin(), keys.end(), names_[i]);
        SR_CHECK(it != keys.end(), "{}: feature '{}' is not in the KJT keys [{}]", module_,
                 names_[i], fmt::join(keys, ", "));
        const auto k = static_cast<size_t>(it - keys.begin());
        direct_ = direct_ && k == i;
        kjt_begin_[i] = kjt.offset_per_key()[k];
        count_[i] = kjt.length_per_key()[k];
        kjt_lengths_[i] = kjt.lengths_offset_per_key()[k];
    }
    if (direct_) {
        ids_ = kjt.values();
        offsets_ = kjt.offsets();
        weights_ = weighted ? kjt.weights() : Tensor();
        packed_begin_ = kjt_begin_;
        return;
    }
    int64_t num_ids = 0;
    for (int64_t c : count_) {
        num_ids += c;
    }
    const auto num_features = static_cast<int64_t>(names_.size());
    ids_ = grow_prefix(ids_buffer_, num_ids, DType::kI64);
    offsets_ = grow_prefix(offsets_buffer_, num_features * batch_ + 1, DType::kI64);
    weights_ = weighted ? grow_prefix(weights_buffer_, num_ids, DType::kF32) : Tensor();
    const int64_t* kjt_offsets = kjt.offsets().data<int64_t>();
    int64_t* offsets = offsets_.data<int64_t>();
    int64_t base = 0;
    for (size_t i = 0; i < names_.size(); ++i) {
        const int64_t* key_offsets = kjt_offsets + kjt_lengths_[i];  // this key's B + 1 bounds
        const auto f = static_cast<int64_t>(i);
        for (int64_t b = 0; b < batch_; ++b) {
            offsets[f * batch_ + b] = base + key_offsets[b] - key_offsets[0];
        }
        std::memcpy(ids_.data<int64_t>() + base, kjt.values().data<int64_t>() + kjt_begin_[i],
                    static_cast<size_t>(count_[i]) * sizeof(int64_t));
        if (weighted) {
            std::memcpy(weights_.data<float>() + base, kjt.weights().data<float>() + kjt_begin_[i],
                        static_cast<size_t>(count_[i]) * sizeof(float));
        }
        packed_begin_[i] = base;
        base += count_[i];
    }
    offsets[num_features * batch_] = base;
}

void KjtFeaturePacker::scatter_to_kjt_order(const float* packed, float* kjt_order) const {
    for (size_t i = 0; i < names_.size(); ++i) {
        std::memmove(kjt_order + kjt_begin_[i], packed + packed_begin_[i],
                     static_cast<size_t>(count_[i]) * sizeof(float));
    }
}

}  // namespace shardrec
