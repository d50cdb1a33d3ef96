#include "test/reference/dense_optimizer.h"

#include <cmath>

namespace shardrec::ref {

DenseValues sgd_update(const std::vector<double>& param,
                       const std::vector<double>& grad,
                       double lr,
                       double weight_decay) {
    DenseValues p(param.size());
    for (size_t i = 0; i < param.size(); ++i) {
        p.value[i] = param[i] - lr * (grad[i] + weight_decay * param[i]);
        p.mag[i] =
            std::fabs(param[i]) + lr * (std::fabs(grad[i]) + weight_decay * std::fabs(param[i]));
    }
    return p;
}

AdagradResult adagrad_update(const std::vector<double>& param,
                             const std::vector<double>& grad,
                             const std::vector<double>& state_sum,
                             double lr,
                             double eps,
                             double weight_decay) {
    AdagradResult r{DenseValues(param.size()), DenseValues(param.size())};
    for (size_t i = 0; i < param.size(); ++i) {
        const double g = grad[i] + weight_decay * param[i];
        const double mg = std::fabs(grad[i]) + weight_decay * std::fabs(param[i]);
        const double s = state_sum[i] + g * g, ms = std::fabs(state_sum[i]) + mg * mg;
        const double root = std::sqrt(s);
        // d sqrt(s) = ds / (2 sqrt(s)); plus the rounding of sqrt and of the eps add
        const double mden = (root > 0 ? 0.5 * ms / root : 0.0) + root + eps;
        const double den = root + eps;
        const double upd = lr * g / den;
        const double mupd = lr * (mg / den + std::fabs(g) * mden / (den * den)) + std::fabs(upd);
        r.state_sum.value[i] = s;
        r.state_sum.mag[i] = ms;
        r.param.value[i] = param[i] - upd;
        r.param.mag[i] = std::fabs(param[i]) + mupd;
    }
    return r;
}

AdamResult adam_update(const std::vector<double>& param,
                       const std::vector<double>& grad,
                       const std::vector<double>& exp_avg,
                       const std::vector<double>& exp_avg_sq,
                       double lr,
                       double beta1,
                       double beta2,
                       double eps,
                       double weight_decay,
                       int64_t step) {
    const size_t n = param.size();
    AdamResult r{DenseValues(n), DenseValues(n), DenseValues(n)};
    const double t = static_cast<double>(step);
    const double step_size = lr / (1.0 - std::pow(beta1, t));
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, t));
    for (size_t i = 0; i < n; ++i) {
        const double g = grad[i] + weight_decay * param[i];
        const double mg = std::fabs(grad[i]) + weight_decay * std::fabs(param[i]);
        const double m = beta1 * exp_avg[i] + (1 - beta1) * g;
        const double mm = beta1 * std::fabs(exp_avg[i]) + (1 - beta1) * mg;
        const double v = beta2 * exp_avg_sq[i] + (1 - beta2) * g * g;
        const double mv = beta2 * std::fabs(exp_avg_sq[i]) + (1 - beta2) * mg * mg;
        const double root = std::sqrt(v);
        const double den = root / bc2_sqrt + eps;
        const double mden = ((root > 0 ? 0.5 * mv / root : 0.0) + 2 * root) / bc2_sqrt + eps;
        const double upd = step_size * m / den;
        const double mupd = step_size * (mm / den + std::fabs(m) * mden / (den * den)) +
                            2 * std::fabs(upd);  // + roundings of step_size and bc2_sqrt
        r.exp_avg.value[i] = m;
        r.exp_avg.mag[i] = mm;
        r.exp_avg_sq.value[i] = v;
        r.exp_avg_sq.mag[i] = mv;
        r.param.value[i] = param[i] - upd;
        r.param.mag[i] = std::fabs(param[i]) + mupd;
    }
    return r;
}

}  // namespace shardrec::ref
