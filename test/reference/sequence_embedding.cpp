// Float64 reference of the sequence embedding lookup (see the header).
#include "test/reference/sequence_embedding.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace shardrec::ref {
namespace {

size_t at(int64_t i) {
    return static_cast<size_t>(i);
}

}  // namespace

Values sequence_embedding_forward(const EmbeddingLookup& a, const std::vector<double>& weights) {
    const int64_t F = a.num_features(), B = a.batch(), D = a.dim;
    Values out{std::vector<double>(a.ids.size() * at(D)),
               std::vector<double>(a.ids.size() * at(D))};
    for (int64_t f = 0; f < F; ++f) {
        for (int64_t n = a.offsets[at(f * B)]; n < a.offsets[at((f + 1) * B)]; ++n) {
            for (int64_t d = 0; d < D; ++d) {
                const double w = weights[at(a.row_of(n, f) * D + d)];
                out.value[at(n * D + d)] = w;
                out.mag[at(n * D + d)] = std::fabs(w);
            }
        }
    }
    return out;
}

RowGradients sequence_embedding_row_gradients(const EmbeddingLookup& a,
                                              const std::vector<double>& grad_out) {
    const int64_t F = a.num_features(), B = a.batch(), D = a.dim;
    std::map<int64_t, std::vector<double>> grad, mag;
    std::map<int64_t, int64_t> count;
    for (int64_t f = 0; f < F; ++f) {
        for (int64_t n = a.offsets[at(f * B)]; n < a.offsets[at((f + 1) * B)]; ++n) {
            const int64_t row = a.row_of(n, f);
            auto& g = grad[row];
            auto& m = mag[row];
            g.resize(at(D), 0.0);
            m.resize(at(D), 0.0);
            ++count[row];
            for (int64_t d = 0; d < D; ++d) {
                g[at(d)] += grad_out[at(n * D + d)];
                m[at(d)] += std::fabs(grad_out[at(n * D + d)]);
            }
        }
    }
    RowGradients r;
    for (const auto& [row, g] : grad) {
        r.rows.push_back(row);
        r.grad.insert(r.grad.end(), g.begin(), g.end());
        r.mag.insert(r.mag.end(), mag[row].begin(), mag[row].end());
        r.max_count = std::max(r.max_count, count[row]);
    }
    return r;
}

}  // namespace shardrec::ref
