// Float64 reference of BCE-with-logits, mean over the batch (the judge of
// kernels/bce_with_logits.h): loss = mean_b [log(1 + e^x) - x y], grad_b = (sigmoid(x) - y) / B.
// Letters: B batch.
#pragma once

#include <vector>

#include "test/reference/linear.h"

namespace shardrec::ref {

struct BceWithLogits {
    DenseValues loss;  // [1], chain 4 (per element, summed exactly enough in double)
    DenseValues grad;  // [B], chain 5
};

BceWithLogits bce_with_logits(const std::vector<double>& logits, const std::vector<double>& labels);

}  // namespace shardrec::ref
