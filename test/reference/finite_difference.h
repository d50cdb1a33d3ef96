// Central finite differences in float64, used to check every reference backward (the judge is
// checked too). No engine dependency.
#pragma once

#include <functional>
#include <vector>

namespace shardrec::ref {

// d(loss)/d(x_i) for loss(x) = sum_j upstream_j * f(x)_j, by (f(x+h) - f(x-h)) / 2h per element.
std::vector<double> numerical_gradient(
    const std::function<std::vector<double>(const std::vector<double>&)>& f,
    const std::vector<double>& x,
    const std::vector<double>& upstream,
    double h = 1e-6);

}  // namespace shardrec::ref
