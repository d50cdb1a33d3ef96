// KeyedJaggedTensor (KJT): the sparse input of a batch, F features x B samples x variable length,
// in TorchRec's key-major layout. lengths[f*B + b] is the bag size of key f, sample b; values hold
// all of key 0's bags for the whole batch, then key 1's, ...; offsets = [0, cumsum(lengths)];
// optional weights [N] f32 are parallel to values (id_score_list features).
// Variable batch per key (TorchRec VBE): key f has stride_per_key()[f] samples, its lengths are
// the stride_per_key()[f] entries starting at lengths_offset_per_key()[f], and stride() is the
// largest of them. Letters: F keys, B stride, N values.
// Construction validates and caches length_per_key / offset_per_key on the host, so a KJT moved
// to a device with to() still answers those without a device read. Operations that read the data
// (to_dict, permute, split, concat, validate, str) need host tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/sparse/jagged_tensor.h"

namespace shardrec {

// Grow-only host buffers of one KJT made every batch (the permuted features, the features an
// all-to-all received): its tensors are prefix views of them.
struct KJTBuffers {
    Tensor lengths, values, weights, offsets;

    // A tensor made from them is alive (it views their storage).
    bool in_use() const;
};

// The buffer sets of the KJTs one module makes every batch. A set is handed out again once every
// tensor made from it is gone, so a pipeline holding a few batches in flight allocates nothing
// per batch once it has seen their sizes.
class KJTBufferPool {
public:
    KJTBuffers& acquire();  // a set not in use (a new one when all are)

private:
    std::vector<std::unique_ptr<KJTBuffers>> sets_;
};

class KeyedJaggedTensor {
public:
    KeyedJaggedTensor();  // no keys, stride 0, empty values/lengths, offsets [0]

    // ---- builders (all validate; host tensors) ----
    // values [N] i64, lengths [F*B] i64, weights [N] f32 or absent. stride = B; -1 infers it as
    // lengths.numel() / F (with F == 0 it is 0 unless given).
    // With offsets_buffer, the offsets are a grow-only prefix view of it.
    static KeyedJaggedTensor from_lengths_sync(std::vector<std::string> keys,
                                               Tensor values,
                                               Tensor lengths,
                                               std::optional<Tensor> weights = std::nullopt,
                                               int64_t stride = -1,
                                               Tensor* offsets_buffer = nullptr);
    // offsets [F*B+1] i64 with offsets[0] == 0 and offsets[F*B] == N.
    static KeyedJaggedTensor from_offsets_sync(std::vector<std::string> keys,
                                               Tensor values,
                                               Tensor offsets,
                                               std::optional<Tensor> weights = std::nullopt,
                                               int64_t stride = -1);
    // Variable batch per key: lengths has sum(stride_per_key) entries, key-major.
    static KeyedJaggedTensor from_lengths_variable_stride(
        std::vector<std::string> keys,
        Tensor values,
        Tensor lengths,
        std::vector<int64_t> stride_per_key,
        std::optional<Tensor> weights = std::nullopt);
    // Keys in the given order. All JTs weighted or none; if their batch sizes differ the result
    // has a variable stride per key.
    static KeyedJaggedTensor from_jt_dict(
        const std::vector<std::pair<std::string, JaggedTensor>>& jts);

    // ---- layout ----
    const std::vector<std::string>& keys() const { return keys_; }

    int64_t num_keys() const { return static_cast<int64_t>(keys_.size()); }

    const Tensor& values() const { return values_; }  // [N] i64

    const Tensor& lengths() const { return lengths_; }  // [sum(stride_per_key)] i64

    const Tensor& offsets() const { return offsets_; }  // [sum(stride_per_key) + 1] i64

    bool has_weights() const { return weights_.has_value(); }

    // TorchRec: weights() throws when the KJT is unweighted; weights_or_none() never throws.
    const Tensor& weights() const;

    const std::optional<Tensor>& weights_or_none() const { return weights_; }

    int64_t stride() const { return stride_; }  // B (max over keys when variable)

    const std::vector<int64_t>& stride_per_key() const { return stride_per_key_; }  // [F]

    bool variable_stride_per_key() const { return variable_stride_; }

    const std::vector<int64_t>& length_per_key() const { return length_per_key_; }  // [F]: ids

    const std::vector<int64_t>& offset_per_key() const { return offset_per_key_; }  // [F+1]

    // [F+1]: where each key's lengths start in lengths() (f*B when the stride is fixed).
    const std::vector<int64_t>& lengths_offset_per_key() const { return lengths_offset_per_key_; }

    int64_t key_index(const std::string& key) const;  // throws if absent

    // ---- views and transforms ----
    // key -> JaggedTensor in key order. values/lengths/weights are views into this KJT's
    // buffers (no copy); offsets are rebased to 0 (new tensors).
    std::vector<std::pair<std::string, JaggedTensor>> to_dict() const;
    JaggedTensor operator[](const std::string& key) const;

    // Keys reordered as keys()[indices[i]]; an index may repeat or be left out. Copies, into
    // `into`'s buffers when given, else into new tensors.
    KeyedJaggedTensor permute(const std::vector<int64_t>& indices,
                              KJTBuffers* into = nullptr) const;
    // Consecutive key groups of the given sizes (summing to F; a size may be 0). Copies.
    std::vector<KeyedJaggedTensor> split(const std::vector<int64_t>& segments) const;
    // Keys of all inputs, in order (keys must not repeat). Weighted all or none. The stride is
    // variable if any input is, or if the inputs' strides differ.
    static KeyedJaggedTensor concat(const std::vector<KeyedJaggedTensor>& kjts);

    // This KJT with `weights` (f32 [N], on the values' device) or `values` (i64 [N], same device)
    // in place of its own: the other tensors and the cached layout are shared, nothing is
    // allocated or recomputed.
    KeyedJaggedTensor with_weights(Tensor weights) const;
    KeyedJaggedTensor with_values(Tensor values) const;

    // A copy with every tensor on `device` (the host caches are kept).
    KeyedJaggedTensor to(Device device) const;

    // Throws, naming the key and the sample, unless every length >= 0, offsets match lengths,
    // sum(lengths) == N, lengths has sum(stride_per_key) entries, weights f32 [N], keys unique.
    void validate() const;

    // KeyedJaggedTensor({"product": [[1, 2, 1], [5]], "user": [[2, 3], [4, 1]]}), as TorchRec.
    std::string str() const;

private:
    // Fills every cached field from keys_, values_, lengths_, offsets_, weights_ and
    // stride_per_key_, then validates.
    void finish_and_validate();

    std::vector<std::string> keys_;
    Tensor values_;
    Tensor lengths_;
    Tensor offsets_;
    std::optional<Tensor> weights_;
    int64_t stride_ = 0;
    std::vector<int64_t> stride_per_key_;
    bool variable_stride_ = false;
    std::vector<int64_t> length_per_key_;
    std::vector<int64_t> offset_per_key_;
    std::vector<int64_t> lengths_offset_per_key_;
};

}  // namespace shardrec
