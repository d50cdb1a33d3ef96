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

}  // namespace shardrec::ref
