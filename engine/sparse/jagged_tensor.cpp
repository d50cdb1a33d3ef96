#include "engine/sparse/jagged_tensor.h"

#include <fmt/format.h>

#include <utility>

namespace shardrec {

Tensor offsets_from_lengths(const Tensor& lengths, Tensor* buffer) {
    const int64_t n = lengths.numel();
    Tensor offsets = buffer != nullptr ? grow_prefix(*buffer, n + 1, DType::kI64)
                                       : Tensor::empty({n + 1}, DType::kI64);
    const int64_t* len = lengths.data<int64_t>();
    int64_t* off = offsets.data<int64_t>();
    off[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        off[i + 1] = off[i] + len[i];
    }
    return offsets;
}

Tensor lengths_from_offsets(const Tensor& offsets) {
    const int64_t n = offsets.numel() - 1;
    SR_CHECK(n >= 0, "lengths_from_offsets: offsets must have at least one entry");
    Tensor lengths = Tensor::empty({n}, DType::kI64);
    const int64_t* off = offsets.data<int64_t>();
    int64_t* len = lengths.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
        len[i] = off[i + 1] - off[i];
    }
    return lengths;
}

namespace {

void check_host_1d_i64(const Tensor& t, const char* what) {
    SR_CHECK(t.defined(), "JaggedTensor: {} is undefined", what);
    SR_CHECK(t.device().is_cpu(), "JaggedTensor: {} must be a host tensor, got {}", what, t.str());
    SR_CHECK(t.dim() == 1 && t.dtype() == DType::kI64, "JaggedTensor: {} must be i64 [n], got {}",
             what, t.str());
}

}  // namespace

JaggedTensor JaggedTensor::from_lengths(Tensor values,
                                        Tensor lengths,
                                        std::optional<Tensor> weights) {
    check_host_1d_i64(lengths, "lengths");
    Tensor offsets = offsets_from_lengths(lengths);
    JaggedTensor jt(std::move(values), std::move(lengths), std::move(offsets), std::move(weights));
    jt.validate();
    return jt;
}

JaggedTensor JaggedTensor::from_offsets(Tensor values,
                                        Tensor offsets,
                                        std::optional<Tensor> weights) {
    check_host_1d_i64(offsets, "offsets");
    SR_CHECK(offsets.numel() >= 1, "JaggedTensor: offsets needs B+1 >= 1 entries");
    SR_CHECK(offsets.data<int64_t>()[0] == 0, "JaggedTensor: offsets[0] must be 0, got {}",
             offsets.data<int64_t>()[0]);
    Tensor lengths = lengths_from_offsets(offsets);
    JaggedTensor jt(std::move(values), std::move(lengths), std::move(offsets), std::move(weights));
    jt.validate();
    return jt;
}

JaggedTensor JaggedTensor::from_dense(const std::vector<std::vector<int64_t>>& values,
                                      const std::vector<std::vector<float>>* weights) {
    std::vector<int64_t> flat;
    std::vector<int64_t> lengths;
    std::vector<float> flat_weights;
    if (weights) {
        SR_CHECK(weights->size() == values.size(),
                 "JaggedTensor::from_dense: {} weight bags for {} value bags", weights->size(),
                 values.size());
    }
    for (size_t b = 0; b < values.size(); ++b) {
        flat.insert(flat.end(), values[b].begin(), values[b].end());
        lengths.push_back(static_cast<int64_t>(values[b].size()));
        if (weights) {
            SR_CHECK((*weights)[b].size() == values[b].size(),
                     "JaggedTensor::from_dense: sample {} has {} values but {} weights", b,
                     values[b].size(), (*weights)[b].size());
            flat_weights.insert(flat_weights.end(), (*weights)[b].begin(), (*weights)[b].end());
        }
    }
    std::optional<Tensor> w;
    if (weights) {
        w = Tensor::from_vector(flat_weights);
    }
    return from_lengths(Tensor::from_vector(flat), Tensor::from_vector(lengths), std::move(w));
}

const Tensor& JaggedTensor::weights() const {
    SR_CHECK(weights_.has_value(), "JaggedTensor: weights() called on an unweighted tensor");
    return *weights_;
}

std::vector<std::vector<int64_t>> JaggedTensor::to_dense() const {
    const int64_t batch = num_samples();
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(batch));
    if (batch == 0) {
        return out;
    }
    SR_CHECK(values_.dim() == 1 && values_.device().is_cpu(),
             "JaggedTensor::to_dense: needs host 1-D i64 values, got {}", values_.str());
    const int64_t* v = values_.data<int64_t>();
    const int64_t* off = offsets_.data<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
        out[b].assign(v + off[b], v + off[b + 1]);
    }
    return out;
}

std::vector<std::vector<float>> JaggedTensor::to_dense_weights() const {
    const Tensor& w = weights();
    SR_CHECK(w.device().is_cpu(), "JaggedTensor::to_dense_weights: needs host weights");
    const int64_t batch = num_samples();
    std::vector<std::vector<float>> out(static_cast<size_t>(batch));
    const float* p = w.data<float>();
    const int64_t* off = offsets_.data<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
        out[b].assign(p + off[b], p + off[b + 1]);
    }
    return out;
}

JaggedTensor JaggedTensor::to(Device device) const {
    if (!values_.defined()) {
        return *this;  // the empty JaggedTensor has nothing to move
    }
    std::optional<Tensor> w;
    if (weights_) {
        w = weights_->to(device);
    }
    return JaggedTensor(values_.to(device), lengths_.to(device), offsets_.to(device), std::move(w));
}

void JaggedTensor::validate() const {
    check_host_1d_i64(lengths_, "lengths");
    check_host_1d_i64(offsets_, "offsets");
    SR_CHECK(values_.defined() && values_.dim() >= 1, "JaggedTensor: values must be [N, ...]");
    const int64_t batch = lengths_.numel();
    SR_CHECK(offsets_.numel() == batch + 1, "JaggedTensor: {} offsets for {} samples (want {})",
             offsets_.numel(), batch, batch + 1);
    const int64_t* len = lengths_.data<int64_t>();
    const int64_t* off = offsets_.data<int64_t>();
    SR_CHECK(off[0] == 0, "JaggedTensor: offsets[0] must be 0, got {}", off[0]);
    for (int64_t b = 0; b < batch; ++b) {
        SR_CHECK(len[b] >= 0, "JaggedTensor: sample {} has negative length {}", b, len[b]);
        SR_CHECK(off[b + 1] - off[b] == len[b],
                 "JaggedTensor: sample {} has length {} but offsets [{}, {})", b, len[b], off[b],
                 off[b + 1]);
    }
    SR_CHECK(off[batch] == values_.size(0),
             "JaggedTensor: sum(lengths) = {} but values has {} rows", off[batch], values_.size(0));
    if (weights_) {
        SR_CHECK(weights_->dtype() == DType::kF32 && weights_->dim() == 1 &&
                     weights_->numel() == values_.size(0),
                 "JaggedTensor: weights must be f32 [{}], got {}", values_.size(0),
                 weights_->str());
    }
}

std::string JaggedTensor::str() const {
    if (!values_.defined()) {
        return "JaggedTensor([])";
    }
    if (values_.dim() != 1 || values_.dtype() != DType::kI64 || !values_.device().is_cpu()) {
        return fmt::format("JaggedTensor(values={}, B={})", values_.str(), num_samples());
    }
    std::string s = "JaggedTensor([";
    const auto bags = to_dense();
    for (size_t b = 0; b < bags.size(); ++b) {
        s += fmt::format("{}[{}]", b ? ", " : "", fmt::join(bags[b], ", "));
    }
    return s + "])";
}

}  // namespace shardrec
