// One training or evaluation batch as the loaders produce it and the pipelines consume it:
// dense features, the sparse ids as a KJT (keys = feature names, stride = B) and the labels.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/sparse/keyed_jagged_tensor.h"

// In namespace shardrec, like Tensor and KeyedJaggedTensor: every layer from modules up uses it,
// so it lives here, below modules (the models take it), not in engine/data.
namespace shardrec {

struct Batch {
    Tensor dense;              // [B, num_dense] f32
    KeyedJaggedTensor sparse;  // F keys, stride B, key-major
    Tensor labels;             // [B] f32, 0 or 1

    int64_t batch_size() const { return labels.defined() ? labels.numel() : 0; }

    // A copy with every tensor on `device` (the KJT keeps its host-side per-key caches).
    Batch to(Device device) const {
        return Batch{dense.to(device), sparse.to(device), labels.to(device)};
    }
};

}  // namespace shardrec
