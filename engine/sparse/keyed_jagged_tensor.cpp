#include "engine/sparse/keyed_jagged_tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace shardrec {

namespace {

void check_host_1d(const Tensor& t, DType dtype, const char* what) {
    SR_CHECK(t.defined(), "KeyedJaggedTensor: {} is undefined", what);
    SR_CHECK(t.device().is_cpu(), "KeyedJaggedTensor: {} must be a host tensor, got {}", what,
             t.str());
    SR_CHECK(t.dim() == 1 && t.dtype() == dtype, "KeyedJaggedTensor: {} must be {} [n], got {}",
             what, dtype_name(dtype), t.str());
}

// Appends src[begin, end) (1-D, any dtype) to dst at element offset `at`; returns the new offset.
int64_t append_range(Tensor& dst, int64_t at, const Tensor& src, int64_t begin, int64_t end) {
    const size_t elem = dtype_size(src.dtype());
    if (end > begin) {
        std::memcpy(static_cast<char*>(dst.data_ptr()) + static_cast<size_t>(at) * elem,
                    static_cast<const char*>(src.data_ptr()) + static_cast<size_t>(begin) * elem,
                    static_cast<size_t>(end - begin) * elem);
    }
    return at + (end - begin);
}

}  // namespace

// The offsets [0] of every empty KeyedJaggedTensor, one tensor for the process (nothing writes
// into a KJT's offsets), so that making one allocates nothing: the builders start from one, and
// a training step makes several. Never destroyed: no exit-order dependency.
static const Tensor& empty_offsets() {
    static const Tensor* const offsets = new Tensor(Tensor::zeros({1}, DType::kI64));
    return *offsets;
}

KeyedJaggedTensor::KeyedJaggedTensor()
    : values_(Tensor::empty({0}, DType::kI64)),
      lengths_(Tensor::empty({0}, DType::kI64)),
      offsets_(empty_offsets()),
      offset_per_key_{0},
      lengths_offset_per_key_{0} {}

// ---- builders ----

bool KJTBuffers::in_use() const {
    return lengths.shares_storage() || values.shares_storage() || weights.shares_storage() ||
           offsets.shares_storage();
}

KJTBuffers& KJTBufferPool::acquire() {
    for (const auto& set : sets_) {
        if (!set->in_use())
            return *set;
    }
    sets_.push_back(std::make_unique<KJTBuffers>());
    return *sets_.back();
}

KeyedJaggedTensor KeyedJaggedTensor::from_lengths_sync(std::vector<std::string> keys,
                                                       Tensor values,
                                                       Tensor lengths,
                                                       std::optional<Tensor> weights,
                                                       int64_t stride,
                                                       Tensor* offsets_buffer) {
    check_host_1d(lengths, DType::kI64, "lengths");
    const int64_t num_keys = static_cast<int64_t>(keys.size());
    if (stride < 0) {
        SR_CHECK(num_keys == 0 || lengths.numel() % num_keys == 0,
                 "KeyedJaggedTensor: {} lengths do not split evenly over {} keys", lengths.numel(),
                 num_keys);
        stride = num_keys == 0 ? 0 : lengths.numel() / num_keys;
    }
    SR_CHECK(lengths.numel() == num_keys * stride,
             "KeyedJaggedTensor: lengths has {} entries, want F*B = {}*{} = {}", lengths.numel(),
             num_keys, stride, num_keys * stride);
    KeyedJaggedTensor kjt = KeyedJaggedTensor();
    kjt.keys_ = std::move(keys);
    kjt.values_ = std::move(values);
    kjt.offsets_ = offsets_from_lengths(lengths, offsets_buffer);
    kjt.lengths_ = std::move(lengths);
    kjt.weights_ = std::move(weights);
    kjt.stride_ = stride;
    kjt.stride_per_key_.assign(static_cast<size_t>(num_keys), stride);
    kjt.finish_and_validate();
    return kjt;
}

KeyedJaggedTensor KeyedJaggedTensor::from_offsets_sync(std::vector<std::string> keys,
                                                       Tensor values,
                                                       Tensor offsets,
                                                       std::optional<Tensor> weights,
                                                       int64_t stride) {
    check_host_1d(offsets, DType::kI64, "offsets");
    SR_CHECK(offsets.numel() >= 1, "KeyedJaggedTensor: offsets needs F*B+1 >= 1 entries");
    SR_CHECK(offsets.data<int64_t>()[0] == 0, "KeyedJaggedTensor: offsets[0] must be 0, got {}",
             offsets.data<int64_t>()[0]);
    return from_lengths_sync(std::move(keys), std::move(values), lengths_from_offsets(offsets),
                             std::move(weights), stride);
}

KeyedJaggedTensor KeyedJaggedTensor::from_lengths_variable_stride(
    std::vector<std::string> keys,
    Tensor values,
    Tensor lengths,
    std::vector<int64_t> stride_per_key,
    std::optional<Tensor> weights) {
    check_host_1d(lengths, DType::kI64, "lengths");
    SR_CHECK(stride_per_key.size() == keys.size(), "KeyedJaggedTensor: {} strides for {} keys",
             stride_per_key.size(), keys.size());
    KeyedJaggedTensor kjt = KeyedJaggedTensor();
    kjt.keys_ = std::move(keys);
    kjt.values_ = std::move(values);
    kjt.offsets_ = offsets_from_lengths(lengths);
    kjt.lengths_ = std::move(lengths);
    kjt.weights_ = std::move(weights);
    kjt.stride_per_key_ = std::move(stride_per_key);
    kjt.variable_stride_ = true;
    kjt.finish_and_validate();
    return kjt;
}

KeyedJaggedTensor KeyedJaggedTensor::from_jt_dict(
    const std::vector<std::pair<std::string, JaggedTensor>>& jts) {
    std::vector<KeyedJaggedTensor> parts;
    parts.reserve(jts.size());
    for (const auto& [key, jt] : jts) {
        SR_CHECK(jt.values().defined() && jt.values().dim() == 1,
                 "KeyedJaggedTensor::from_jt_dict: key '{}' needs 1-D i64 values", key);
        parts.push_back(from_lengths_sync({key}, jt.values(), jt.lengths(), jt.weights_or_none(),
                                          jt.num_samples()));
    }
    return concat(parts);
}

void KeyedJaggedTensor::finish_and_validate() {
    const size_t num_keys = keys_.size();
    SR_CHECK(stride_per_key_.size() == num_keys, "KeyedJaggedTensor: {} strides for {} keys",
             stride_per_key_.size(), num_keys);
    lengths_offset_per_key_.assign(num_keys + 1, 0);
    for (size_t f = 0; f < num_keys; ++f) {
        SR_CHECK(stride_per_key_[f] >= 0, "KeyedJaggedTensor: key '{}' has negative stride {}",
                 keys_[f], stride_per_key_[f]);
        lengths_offset_per_key_[f + 1] = lengths_offset_per_key_[f] + stride_per_key_[f];
    }
    if (variable_stride_) {
        stride_ = 0;
        for (int64_t s : stride_per_key_) {
            stride_ = std::max(stride_, s);
        }
    }
    check_host_1d(lengths_, DType::kI64, "lengths");
    check_host_1d(offsets_, DType::kI64, "offsets");
    SR_CHECK(lengths_.numel() == lengths_offset_per_key_[num_keys] &&
                 offsets_.numel() == lengths_.numel() + 1,
             "KeyedJaggedTensor: {} lengths and {} offsets for sum(stride_per_key) = {}",
             lengths_.numel(), offsets_.numel(), lengths_offset_per_key_[num_keys]);
    const int64_t* off = offsets_.data<int64_t>();
    length_per_key_.assign(num_keys, 0);
    offset_per_key_.assign(num_keys + 1, 0);
    for (size_t f = 0; f < num_keys; ++f) {
        offset_per_key_[f + 1] = off[lengths_offset_per_key_[f + 1]];
        length_per_key_[f] = offset_per_key_[f + 1] - off[lengths_offset_per_key_[f]];
    }
    validate();
}

// ---- layout ----

const Tensor& KeyedJaggedTensor::weights() const {
    SR_CHECK(weights_.has_value(), "KeyedJaggedTensor: weights() called on an unweighted KJT");
    return *weights_;
}

int64_t KeyedJaggedTensor::key_index(const std::string& key) const {
    const auto it = std::find(keys_.begin(), keys_.end(), key);
    SR_CHECK(it != keys_.end(), "KeyedJaggedTensor: no key '{}' (keys: {})", key,
             fmt::join(keys_, ", "));
    return static_cast<int64_t>(it - keys_.begin());
}

void KeyedJaggedTensor::validate() const {
    check_host_1d(values_, DType::kI64, "values");
    check_host_1d(lengths_, DType::kI64, "lengths");
    check_host_1d(offsets_, DType::kI64, "offsets");
    const size_t num_keys = keys_.size();
    std::unordered_set<std::string> seen;
    for (const auto& key : keys_) {
        SR_CHECK(seen.insert(key).second, "KeyedJaggedTensor: key '{}' appears twice", key);
    }
    SR_CHECK(stride_per_key_.size() == num_keys && lengths_offset_per_key_.size() == num_keys + 1,
             "KeyedJaggedTensor: per-key metadata does not match {} keys", num_keys);
    const int64_t total = lengths_offset_per_key_[num_keys];
    SR_CHECK(lengths_.numel() == total && offsets_.numel() == total + 1,
             "KeyedJaggedTensor: {} lengths and {} offsets, want {} and {}", lengths_.numel(),
             offsets_.numel(), total, total + 1);
    const int64_t* len = lengths_.data<int64_t>();
    const int64_t* off = offsets_.data<int64_t>();
    SR_CHECK(off[0] == 0, "KeyedJaggedTensor: offsets[0] must be 0, got {}", off[0]);
    for (size_t f = 0; f < num_keys; ++f) {
        for (int64_t i = lengths_offset_per_key_[f]; i < lengths_offset_per_key_[f + 1]; ++i) {
            const int64_t sample = i - lengths_offset_per_key_[f];
            SR_CHECK(len[i] >= 0, "KeyedJaggedTensor: key '{}' sample {} has negative length {}",
                     keys_[f], sample, len[i]);
            SR_CHECK(off[i + 1] - off[i] == len[i],
                     "KeyedJaggedTensor: key '{}' sample {} has length {} but offsets [{}, {})",
                     keys_[f], sample, len[i], off[i], off[i + 1]);
        }
    }
    SR_CHECK(off[total] == values_.numel(),
             "KeyedJaggedTensor: sum(lengths) = {} but values has {} entries", off[total],
             values_.numel());
    if (weights_) {
        SR_CHECK(weights_->defined() && weights_->dtype() == DType::kF32 && weights_->dim() == 1 &&
                     weights_->numel() == values_.numel(),
                 "KeyedJaggedTensor: weights must be f32 [{}] like values, got {}", values_.numel(),
                 weights_->defined() ? weights_->str() : "undefined");
    }
}

// ---- views and transforms ----

std::vector<std::pair<std::string, JaggedTensor>> KeyedJaggedTensor::to_dict() const {
    std::vector<std::pair<std::string, JaggedTensor>> out;
    out.reserve(keys_.size());
    for (size_t f = 0; f < keys_.size(); ++f) {
        out.emplace_back(keys_[f], (*this)[keys_[f]]);
    }
    return out;
}

JaggedTensor KeyedJaggedTensor::operator[](const std::string& key) const {
    SR_CHECK(offsets_.device().is_cpu(), "KeyedJaggedTensor: to_dict needs host tensors");
    const auto f = static_cast<size_t>(key_index(key));
    const int64_t lo = lengths_offset_per_key_[f];
    const int64_t hi = lengths_offset_per_key_[f + 1];
    const int64_t vlo = offset_per_key_[f];
    const int64_t vhi = offset_per_key_[f + 1];
    Tensor offsets = Tensor::empty({hi - lo + 1}, DType::kI64);
    const int64_t* src = offsets_.data<int64_t>();
    int64_t* dst = offsets.data<int64_t>();
    for (int64_t i = lo; i <= hi; ++i) {
        dst[i - lo] = src[i] - vlo;
    }
    std::optional<Tensor> w;
    if (weights_) {
        w = weights_->slice(vlo, vhi);
    }
    return JaggedTensor(values_.slice(vlo, vhi), lengths_.slice(lo, hi), std::move(offsets),
                        std::move(w));
}

KeyedJaggedTensor KeyedJaggedTensor::permute(const std::vector<int64_t>& indices,
                                             KJTBuffers* into) const {
    SR_CHECK(values_.device().is_cpu(), "KeyedJaggedTensor::permute needs host tensors");
    const int64_t num_keys = static_cast<int64_t>(keys_.size());
    KeyedJaggedTensor out = KeyedJaggedTensor();
    int64_t total_lengths = 0;
    int64_t total_values = 0;
    for (int64_t idx : indices) {
        SR_CHECK(idx >= 0 && idx < num_keys, "KeyedJaggedTensor::permute: index {} out of [0, {})",
                 idx, num_keys);
        out.keys_.push_back(keys_[idx]);
        out.stride_per_key_.push_back(stride_per_key_[idx]);
        total_lengths += stride_per_key_[idx];
        total_values += length_per_key_[idx];
    }
    const auto make = [](Tensor* buffer, int64_t n, DType dtype) {
        return buffer != nullptr ? grow_prefix(*buffer, n, dtype) : Tensor::empty({n}, dtype);
    };
    out.lengths_ = make(into != nullptr ? &into->lengths : nullptr, total_lengths, DType::kI64);
    out.values_ = make(into != nullptr ? &into->values : nullptr, total_values, DType::kI64);
    if (weights_) {
        out.weights_ = make(into != nullptr ? &into->weights : nullptr, total_values, DType::kF32);
    }
    int64_t at_len = 0;
    int64_t at_val = 0;
    for (int64_t idx : indices) {
        const auto f = static_cast<size_t>(idx);
        at_len = append_range(out.lengths_, at_len, lengths_, lengths_offset_per_key_[f],
                              lengths_offset_per_key_[f + 1]);
        if (weights_) {
            append_range(*out.weights_, at_val, *weights_, offset_per_key_[f],
                         offset_per_key_[f + 1]);
        }
        at_val =
            append_range(out.values_, at_val, values_, offset_per_key_[f], offset_per_key_[f + 1]);
    }
    out.offsets_ = offsets_from_lengths(out.lengths_, into != nullptr ? &into->offsets : nullptr);
    out.stride_ = stride_;
    out.variable_stride_ = variable_stride_;
    out.finish_and_validate();
    return out;
}

std::vector<KeyedJaggedTensor> KeyedJaggedTensor::split(
    const std::vector<int64_t>& segments) const {
    SR_CHECK(values_.device().is_cpu(), "KeyedJaggedTensor::split needs host tensors");
    int64_t sum = 0;
    for (int64_t s : segments) {
        SR_CHECK(s >= 0, "KeyedJaggedTensor::split: negative segment {}", s);
        sum += s;
    }
    SR_CHECK(sum == num_keys(),
             "KeyedJaggedTensor::split: segments sum to {} but there are {} keys", sum, num_keys());
    std::vector<KeyedJaggedTensor> out;
    out.reserve(segments.size());
    size_t key_begin = 0;
    for (int64_t s : segments) {
        const size_t key_end = key_begin + static_cast<size_t>(s);
        std::vector<int64_t> indices;
        for (size_t f = key_begin; f < key_end; ++f) {
            indices.push_back(static_cast<int64_t>(f));
        }
        out.push_back(permute(indices));
        key_begin = key_end;
    }
    return out;
}

KeyedJaggedTensor KeyedJaggedTensor::concat(const std::vector<KeyedJaggedTensor>& kjts) {
    KeyedJaggedTensor out;
    bool variable = false;
    int64_t common_stride = -1;
    int first_with_keys = -1;
    int64_t total_lengths = 0;
    int64_t total_values = 0;
    for (size_t i = 0; i < kjts.size(); ++i) {
        const KeyedJaggedTensor& k = kjts[i];
        SR_CHECK(k.values_.device().is_cpu(), "KeyedJaggedTensor::concat needs host tensors");
        if (k.num_keys() == 0) {
            continue;
        }
        if (first_with_keys < 0) {
            first_with_keys = static_cast<int>(i);
            common_stride = k.stride_;
        }
        // An empty KJT carries no bags, so its weightedness does not constrain the others.
        SR_CHECK(k.has_weights() == kjts[first_with_keys].has_weights(),
                 "KeyedJaggedTensor::concat: input {} is {} but input {} is {}", i,
                 k.has_weights() ? "weighted" : "unweighted", first_with_keys,
                 kjts[first_with_keys].has_weights() ? "weighted" : "unweighted");
        variable = variable || k.variable_stride_ || k.stride_ != common_stride;
        out.keys_.insert(out.keys_.end(), k.keys_.begin(), k.keys_.end());
        out.stride_per_key_.insert(out.stride_per_key_.end(), k.stride_per_key_.begin(),
                                   k.stride_per_key_.end());
        total_lengths += k.lengths_.numel();
        total_values += k.values_.numel();
    }
    if (first_with_keys < 0) {
        if (!kjts.empty()) {
            out.stride_ = kjts[0].stride_;
        }
        return out;
    }
    const bool weighted = kjts[first_with_keys].has_weights();
    out.lengths_ = Tensor::empty({total_lengths}, DType::kI64);
    out.values_ = Tensor::empty({total_values}, DType::kI64);
    if (weighted) {
        out.weights_ = Tensor::empty({total_values}, DType::kF32);
    }
    int64_t at_len = 0;
    int64_t at_val = 0;
    for (const KeyedJaggedTensor& k : kjts) {
        if (k.num_keys() == 0) {
            continue;
        }
        at_len = append_range(out.lengths_, at_len, k.lengths_, 0, k.lengths_.numel());
        if (weighted) {
            append_range(*out.weights_, at_val, *k.weights_, 0, k.values_.numel());
        }
        at_val = append_range(out.values_, at_val, k.values_, 0, k.values_.numel());
    }
    out.offsets_ = offsets_from_lengths(out.lengths_);
    out.stride_ = common_stride;
    out.variable_stride_ = variable;
    out.finish_and_validate();
    return out;
}

KeyedJaggedTensor KeyedJaggedTensor::with_weights(Tensor weights) const {
    SR_CHECK(weights.dtype() == DType::kF32 && weights.shape() == Shape({values_.numel()}) &&
                 weights.device() == values_.device(),
             "KeyedJaggedTensor::with_weights: weights must be f32[{}] on {}, got {}",
             values_.numel(), values_.device().str(), weights.str());
    KeyedJaggedTensor out = *this;
    out.weights_ = std::move(weights);
    return out;
}

KeyedJaggedTensor KeyedJaggedTensor::with_values(Tensor values) const {
    SR_CHECK(values.dtype() == DType::kI64 && values.shape() == values_.shape() &&
                 values.device() == values_.device(),
             "KeyedJaggedTensor::with_values: values must be i64[{}] on {}, got {}",
             values_.numel(), values_.device().str(), values.str());
    KeyedJaggedTensor out = *this;
    out.values_ = std::move(values);
    return out;
}

KeyedJaggedTensor KeyedJaggedTensor::to(Device device) const {
    KeyedJaggedTensor out = *this;
    out.values_ = values_.to(device);
    out.lengths_ = lengths_.to(device);
    out.offsets_ = offsets_.to(device);
    if (weights_) {
        out.weights_ = weights_->to(device);
    }
    return out;
}

std::string KeyedJaggedTensor::str() const {
    std::string s = "KeyedJaggedTensor({";
    const auto dict = to_dict();
    for (size_t f = 0; f < dict.size(); ++f) {
        const auto bags = dict[f].second.to_dense();
        std::vector<std::string> parts;
        for (const auto& bag : bags) {
            parts.push_back(fmt::format("[{}]", fmt::join(bag, ", ")));
        }
        s += fmt::format("{}\"{}\": [{}]", f ? ", " : "", dict[f].first, fmt::join(parts, ", "));
    }
    return s + "})";
}

}  // namespace shardrec
