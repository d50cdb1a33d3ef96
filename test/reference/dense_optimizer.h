// Float64 reference of the dense optimizer updates (the judge of kernels/dense_optimizer.h), with
// torch.optim semantics and L2 weight decay. Each returns the new parameter (and state), with mags
// for the derived tolerance; chains are at most 8 roundings.
#pragma once

#include <cstdint>
#include <vector>

#include "test/reference/linear.h"

namespace shardrec::ref {

DenseValues sgd_update(const std::vector<double>& param,
                       const std::vector<double>& grad,
                       double lr,
                       double weight_decay);

struct AdagradResult {
    DenseValues param;
    DenseValues state_sum;
};

AdagradResult adagrad_update(const std::vector<double>& param,
                             const std::vector<double>& grad,
                             const std::vector<double>& state_sum,
                             double lr,
                             double eps,
                             double weight_decay);

struct AdamResult {
    DenseValues param;
    DenseValues exp_avg;
    DenseValues exp_avg_sq;
};

AdamResult adam_update(const std::vector<double>& param,
                       const std::vector<double>& grad,
                       const std::vector<double>& exp_avg,
                       const std::vector<double>& exp_avg_sq,
                       double lr,
                       double beta1,
                       double beta2,
                       double eps,
                       double weight_decay,
                       int64_t step);

}  // namespace shardrec::ref
