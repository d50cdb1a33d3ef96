// What a model needs from its sparse arch, whether the tables live in this process
// (EmbeddingBagCollection) or are sharded over the ranks (ShardedEmbeddingBagCollection).
// TorchRec: EmbeddingBagCollectionInterface.
#pragma once

#include <string>
#include <vector>

#include "engine/core/stream.h"
#include "engine/modules/module.h"
#include "engine/sparse/keyed_jagged_tensor.h"
#include "engine/sparse/keyed_tensor.h"

namespace shardrec {

class EmbeddingBagCollectionInterface : public Module {
public:
    // Pooled embeddings [B, sum D] for the features of the KJT (this rank's batch), keys
    // embedding_names(). The values are reused by the next forward (copy them to keep them).
    virtual KeyedTensor forward(const KeyedJaggedTensor& features, Stream& stream) = 0;
    // grad_values [B, sum D] of the latest forward: updates the rows through the fused optimizer.
    virtual void backward(const Tensor& grad_values, Stream& stream) = 0;
    virtual void set_learning_rate(float lr) = 0;
    virtual const std::vector<std::string>& embedding_names() const = 0;
    virtual const std::vector<int64_t>& embedding_dims() const = 0;
    // Bytes of the rows and of the fused optimizer state held by this process.
    virtual int64_t parameter_bytes() const = 0;
    virtual int64_t optimizer_state_bytes() const = 0;
};

}  // namespace shardrec
