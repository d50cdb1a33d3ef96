#include "engine/sparse/keyed_tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace shardrec {

namespace {

// dst[:, dst_col : dst_col+width] = src[:, src_col : src_col+width] for row-major [B, C] tensors
// of one dtype on the host.
void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t width) {
    const int64_t batch = src.size(0);
    const size_t elem = dtype_size(src.dtype());
    const size_t dst_row = static_cast<size_t>(dst.size(1)) * elem;
    const size_t src_row = static_cast<size_t>(src.size(1)) * elem;
    char* d = static_cast<char*>(dst.data_ptr()) + static_cast<size_t>(dst_col) * elem;
    const char* s = static_cast<const char*>(src.data_ptr()) + static_cast<size_t>(src_col) * elem;
    const size_t bytes = static_cast<size_t>(width) * elem;
    if (bytes == 0) {
        return;
    }
    for (int64_t b = 0; b < batch; ++b) {
        std::memcpy(d + static_cast<size_t>(b) * dst_row, s + static_cast<size_t>(b) * src_row,
                    bytes);
    }
}

void check_host_2d(const Tensor& t, const char* what) {
    SR_CHECK(t.defined() && t.dim() == 2, "KeyedTensor: {} must be [B, D], got {}", what,
             t.defined() ? t.str() : "undefined");
    SR_CHECK(t.device().is_cpu(), "KeyedTensor: {} must be a host tensor, got {}", what, t.str());
}

}  // namespace

KeyedTensor::KeyedTensor(std::vector<std::string> keys,
                         std::vector<int64_t> length_per_key,
                         Tensor values,
                         int64_t key_dim)
    : keys_(std::move(keys)),
      length_per_key_(std::move(length_per_key)),
      values_(std::move(values)) {
    SR_CHECK(key_dim == 1, "KeyedTensor: only key_dim = 1 is supported, got {}", key_dim);
    SR_CHECK(keys_.size() == length_per_key_.size(), "KeyedTensor: {} keys but {} lengths",
             keys_.size(), length_per_key_.size());
    SR_CHECK(values_.defined() && values_.dim() == 2, "KeyedTensor: values must be [B, sum(D)]");
    std::unordered_set<std::string> seen;
    offset_per_key_.assign(1, 0);
    for (size_t k = 0; k < keys_.size(); ++k) {
        SR_CHECK(seen.insert(keys_[k]).second, "KeyedTensor: key '{}' appears twice", keys_[k]);
        SR_CHECK(length_per_key_[k] >= 0, "KeyedTensor: key '{}' has negative dim {}", keys_[k],
                 length_per_key_[k]);
        offset_per_key_.push_back(offset_per_key_.back() + length_per_key_[k]);
    }
    SR_CHECK(values_.size(1) == offset_per_key_.back(),
             "KeyedTensor: values {} has {} columns but sum(length_per_key) = {}", values_.str(),
             values_.size(1), offset_per_key_.back());
}

KeyedTensor KeyedTensor::from_tensor_list(std::vector<std::string> keys,
                                          const std::vector<Tensor>& tensors) {
    SR_CHECK(keys.size() == tensors.size(), "KeyedTensor::from_tensor_list: {} keys, {} tensors",
             keys.size(), tensors.size());
    SR_CHECK(!tensors.empty(), "KeyedTensor::from_tensor_list: needs at least one tensor");
    std::vector<int64_t> dims;
    for (size_t k = 0; k < tensors.size(); ++k) {
        check_host_2d(tensors[k], "each tensor");
        SR_CHECK(
            tensors[k].size(0) == tensors[0].size(0) && tensors[k].dtype() == tensors[0].dtype(),
            "KeyedTensor::from_tensor_list: tensor {} is {} but tensor 0 is {}", k,
            tensors[k].str(), tensors[0].str());
        dims.push_back(tensors[k].size(1));
    }
    int64_t total = 0;
    for (int64_t d : dims) {
        total += d;
    }
    Tensor values = Tensor::empty({tensors[0].size(0), total}, tensors[0].dtype());
    int64_t col = 0;
    for (size_t k = 0; k < tensors.size(); ++k) {
        copy_columns(values, col, tensors[k], 0, dims[k]);
        col += dims[k];
    }
    return KeyedTensor(std::move(keys), std::move(dims), std::move(values));
}

int64_t KeyedTensor::key_index(const std::string& key) const {
    const auto it = std::find(keys_.begin(), keys_.end(), key);
    SR_CHECK(it != keys_.end(), "KeyedTensor: no key '{}' (keys: {})", key, fmt::join(keys_, ", "));
    return static_cast<int64_t>(it - keys_.begin());
}

Tensor KeyedTensor::operator[](const std::string& key) const {
    check_host_2d(values_, "values");
    const auto k = static_cast<size_t>(key_index(key));
    Tensor out = Tensor::empty({values_.size(0), length_per_key_[k]}, values_.dtype());
    copy_columns(out, 0, values_, offset_per_key_[k], length_per_key_[k]);
    return out;
}

std::vector<std::pair<std::string, Tensor>> KeyedTensor::to_dict() const {
    std::vector<std::pair<std::string, Tensor>> out;
    out.reserve(keys_.size());
    for (const auto& key : keys_) {
        out.emplace_back(key, (*this)[key]);
    }
    return out;
}

std::vector<Tensor> KeyedTensor::regroup(const std::vector<KeyedTensor>& keyed_tensors,
                                         const std::vector<std::vector<std::string>>& groups) {
    SR_CHECK(!keyed_tensors.empty(), "KeyedTensor::regroup: needs at least one KeyedTensor");
    const int64_t batch = keyed_tensors[0].batch_size();
    const DType dtype = keyed_tensors[0].values().dtype();
    for (const KeyedTensor& kt : keyed_tensors) {
        check_host_2d(kt.values_, "values");
        SR_CHECK(kt.batch_size() == batch && kt.values_.dtype() == dtype,
                 "KeyedTensor::regroup: inputs disagree: {} vs {}", kt.values_.str(),
                 keyed_tensors[0].values_.str());
    }
    // Where each key lives: (which KT, which key index), first match in input order.
    auto locate = [&](const std::string& key) -> std::pair<size_t, size_t> {
        for (size_t t = 0; t < keyed_tensors.size(); ++t) {
            const auto& keys = keyed_tensors[t].keys_;
            const auto it = std::find(keys.begin(), keys.end(), key);
            if (it != keys.end()) {
                return {t, static_cast<size_t>(it - keys.begin())};
            }
        }
        SR_CHECK(false, "KeyedTensor::regroup: no input has key '{}'", key);
        return {0, 0};
    };
    std::vector<Tensor> out;
    out.reserve(groups.size());
    for (const auto& group : groups) {
        std::vector<std::pair<size_t, size_t>> where;
        int64_t total = 0;
        for (const auto& key : group) {
            where.push_back(locate(key));
            total += keyed_tensors[where.back().first].length_per_key_[where.back().second];
        }
        Tensor t = Tensor::empty({batch, total}, dtype);
        int64_t col = 0;
        for (const auto& [kt, k] : where) {
            const KeyedTensor& src = keyed_tensors[kt];
            copy_columns(t, col, src.values_, src.offset_per_key_[k], src.length_per_key_[k]);
            col += src.length_per_key_[k];
        }
        out.push_back(std::move(t));
    }
    return out;
}

KeyedTensor KeyedTensor::concat(const std::vector<KeyedTensor>& keyed_tensors) {
    SR_CHECK(!keyed_tensors.empty(), "KeyedTensor::concat: needs at least one KeyedTensor");
    std::vector<std::string> keys;
    std::vector<int64_t> dims;
    for (const KeyedTensor& kt : keyed_tensors) {
        check_host_2d(kt.values_, "values");
        SR_CHECK(kt.batch_size() == keyed_tensors[0].batch_size() &&
                     kt.values_.dtype() == keyed_tensors[0].values_.dtype(),
                 "KeyedTensor::concat: inputs disagree: {} vs {}", kt.values_.str(),
                 keyed_tensors[0].values_.str());
        keys.insert(keys.end(), kt.keys_.begin(), kt.keys_.end());
        dims.insert(dims.end(), kt.length_per_key_.begin(), kt.length_per_key_.end());
    }
    int64_t total = 0;
    for (int64_t d : dims) {
        total += d;
    }
    Tensor values =
        Tensor::empty({keyed_tensors[0].batch_size(), total}, keyed_tensors[0].values_.dtype());
    int64_t col = 0;
    for (const KeyedTensor& kt : keyed_tensors) {
        copy_columns(values, col, kt.values_, 0, kt.values_.size(1));
        col += kt.values_.size(1);
    }
    return KeyedTensor(std::move(keys), std::move(dims), std::move(values));
}

}  // namespace shardrec
