#include "test/reference/finite_difference.h"

#include <algorithm>
#include <cmath>

namespace shardrec::ref {

std::vector<double> numerical_gradient(
    const std::function<std::vector<double>(const std::vector<double>&)>& f,
    const std::vector<double>& x,
    const std::vector<double>& upstream,
    double h) {
    std::vector<double> grad(x.size());
    std::vector<double> xp = x;
    for (size_t i = 0; i < x.size(); ++i) {
        xp[i] = x[i] + h;
        const std::vector<double> fp = f(xp);
        xp[i] = x[i] - h;
        const std::vector<double> fm = f(xp);
        xp[i] = x[i];
        double g = 0;
        for (size_t j = 0; j < fp.size(); ++j)
            g += upstream[j] * (fp[j] - fm[j]);
        grad[i] = g / (2 * h);
    }
    return grad;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double worst = a.size() == b.size() ? 0.0 : INFINITY;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.0, std::fabs(b[i])));
    }
    return worst;
}

}  // namespace shardrec::ref
