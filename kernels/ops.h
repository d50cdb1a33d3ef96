// The op list: every kernel entry the backends define, by name. The backend-ops coverage test
// fails for any OpKind without a case in test/ops/ (ggml's --show-coverage as a gate).
#pragma once

#include <array>
#include <cstddef>

namespace shardrec::kernels {

#define SHARDREC_OPS(X)                \
    X(kEmbeddingBagForward)            \
    X(kEmbeddingBagBackward)           \
    X(kEmbeddingBagBackwardFused)      \
    X(kSequenceEmbeddingForward)       \
    X(kSequenceEmbeddingBackwardFused) \
    X(kLinearForward)                  \
    X(kLinearBackward)                 \
    X(kDotInteractionForward)          \
    X(kDotInteractionBackward)         \
    X(kCrossNetForward)                \
    X(kCrossNetBackward)               \
    X(kVectorCrossNetForward)          \
    X(kVectorCrossNetBackward)         \
    X(kMixtureCrossNetForward)         \
    X(kMixtureCrossNetBackward)        \
    X(kSwishLayerNormForward)          \
    X(kSwishLayerNormBackward)         \
    X(kFactorizationMachineForward)    \
    X(kFactorizationMachineBackward)   \
    X(kBceWithLogits)                  \
    X(kSgdUpdate)                      \
    X(kAdagradUpdate)                  \
    X(kAdamUpdate)                     \
    X(kAsynchronousCompleteCumsum)     \
    X(kPermuteSparseData)              \
    X(kBlockBucketizeSparseFeatures)   \
    X(kAdd)                            \
    X(kColumnsAxpy)                    \
    X(kFill)                           \
    X(kEmbeddingInit)                  \
    X(kQCommEncode)                    \
    X(kQCommDecode)                    \
    X(kQuantizeRows)                   \
    X(kDequantizeRows)                 \
    X(kQuantEmbeddingBagForward)       \
    X(kCacheRowsPack)                  \
    X(kCacheRowsUnpack)

enum class OpKind {
#define SR_OP_ENUM(name) name,
    SHARDREC_OPS(SR_OP_ENUM)
#undef SR_OP_ENUM
};

constexpr std::array kOpNames = {
#define SR_OP_NAME(name) #name,
    SHARDREC_OPS(SR_OP_NAME)
#undef SR_OP_NAME
};

constexpr size_t kNumOps = kOpNames.size();

inline const char* op_name(OpKind op) {
    return kOpNames[static_cast<size_t>(op)] + 1;
}

}  // namespace shardrec::kernels
