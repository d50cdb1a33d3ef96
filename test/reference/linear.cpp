#include "test/reference/linear.h"

#include <cmath>

namespace shardrec::ref {

DenseValues exact(const std::vector<double>& x) {
    DenseValues r(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        r.value[i] = x[i];
        r.mag[i] = std::fabs(x[i]);
    }
    return r;
}

DenseValues matmul(
    const DenseValues& a, bool ta, const DenseValues& b, bool tb, int64_t M, int64_t N, int64_t K) {
    DenseValues c(static_cast<size_t>(M * N));
    // Rows of c in parallel (the bench's MLPerf shapes take minutes on one core); every element
    // still sums its K terms in order from zero, so the result does not depend on the threads.
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
        double* cv = c.value.data() + m * N;
        double* cm = c.mag.data() + m * N;
        auto at_a = [&](int64_t k) { return static_cast<size_t>(ta ? k * M + m : m * K + k); };
        if (tb) {  // b is [N, K]: k innermost reads both operands' rows
            for (int64_t n = 0; n < N; ++n) {
                for (int64_t k = 0; k < K; ++k) {
                    const size_t ia = at_a(k), ib = static_cast<size_t>(n * K + k);
                    cv[n] += a.value[ia] * b.value[ib];
                    cm[n] += a.mag[ia] * b.mag[ib];
                }
            }
        } else {  // b is [K, N]: n innermost
            for (int64_t k = 0; k < K; ++k) {
                const size_t ia = at_a(k);
                const double av = a.value[ia], am = a.mag[ia];
                for (int64_t n = 0; n < N; ++n) {
                    cv[n] += av * b.value[static_cast<size_t>(k * N + n)];
                    cm[n] += am * b.mag[static_cast<size_t>(k * N + n)];
                }
            }
        }
    }
    return c;
}

DenseValues add(const DenseValues& a, const DenseValues& b) {
    DenseValues r(a.value.size());
    for (size_t i = 0; i < r.value.size(); ++i) {
        r.value[i] = a.value[i] + b.value[i];
        r.mag[i] = a.mag[i] + b.mag[i];
    }
    return r;
}

DenseValues mul(const DenseValues& a, const DenseValues& b) {
    DenseValues r(a.value.size());
    for (size_t i = 0; i < r.value.size(); ++i) {
        r.value[i] = a.value[i] * b.value[i];
        r.mag[i] = a.mag[i] * b.mag[i];
    }
    return r;
}

DenseValues add_row_vector(const DenseValues& a, const DenseValues& bias, int64_t R, int64_t C) {
    DenseValues r(a.value.size());
    for (int64_t i = 0; i < R; ++i) {
        for (int64_t c = 0; c < C; ++c) {
            r.value[i * C + c] = a.value[i * C + c] + bias.value[c];
            r.mag[i * C + c] = a.mag[i * C + c] + bias.mag[c];
        }
    }
    return r;
}

DenseValues sum_rows(const DenseValues& a, int64_t R, int64_t C) {
    DenseValues r(static_cast<size_t>(C));
    for (int64_t i = 0; i < R; ++i) {
        for (int64_t c = 0; c < C; ++c) {
            r.value[c] += a.value[i * C + c];
            r.mag[c] += a.mag[i * C + c];
        }
    }
    return r;
}

double act_value(Act act, double z) {
    switch (act) {
        case Act::kRelu:
            return z > 0 ? z : 0.0;
        case Act::kSigmoid:
            return 1.0 / (1.0 + std::exp(-z));
        case Act::kIdentity:
            break;
    }
    return z;
}

double act_mag(Act act, double z, double mag_z) {
    if (act != Act::kSigmoid) {
        return mag_z;
    }
    const double s = act_value(act, z);
    return s * (1 - s) * mag_z + s;
}

double act_grad_from_output(Act act, double y) {
    switch (act) {
        case Act::kRelu:
            return y > 0 ? 1.0 : 0.0;
        case Act::kSigmoid:
            return y * (1 - y);
        case Act::kIdentity:
            break;
    }
    return 1.0;
}

double act_grad_mag(Act act, double y) {
    if (act == Act::kSigmoid) {
        return std::fabs(y) * (1 + std::fabs(y));
    }
    return act_grad_from_output(act, y);
}

DenseValues linear_forward(const std::vector<double>& x,
                           const std::vector<double>& w,
                           const std::vector<double>& bias,
                           int64_t B,
                           int64_t I,
                           int64_t O,
                           Act act) {
    DenseValues y(static_cast<size_t>(B * O));
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t o = 0; o < O; ++o) {
            double z = bias.empty() ? 0.0 : bias[o];
            double mag = std::fabs(z);
            for (int64_t i = 0; i < I; ++i) {
                z += x[b * I + i] * w[o * I + i];
                mag += std::fabs(x[b * I + i] * w[o * I + i]);
            }
            y.value[b * O + o] = act_value(act, z);
            y.mag[b * O + o] = act_mag(act, z, mag);
        }
    }
    return y;
}

LinearGrads linear_backward(const std::vector<double>& x,
                            const std::vector<double>& w,
                            const std::vector<double>& y,
                            const std::vector<double>& grad_y,
                            int64_t B,
                            int64_t I,
                            int64_t O,
                            Act act) {
    std::vector<double> g(static_cast<size_t>(B * O)), gm(g.size());  // value, mag
    for (int64_t k = 0; k < B * O; ++k) {
        g[k] = grad_y[k] * act_grad_from_output(act, y[k]);
        gm[k] = std::fabs(grad_y[k]) * act_grad_mag(act, y[k]);
    }
    LinearGrads r{DenseValues(static_cast<size_t>(B * I)), DenseValues(static_cast<size_t>(O * I)),
                  DenseValues(static_cast<size_t>(O))};
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < I; ++i) {
            for (int64_t o = 0; o < O; ++o) {
                r.grad_x.value[b * I + i] += g[b * O + o] * w[o * I + i];
                r.grad_x.mag[b * I + i] += gm[b * O + o] * std::fabs(w[o * I + i]);
            }
        }
    }
    for (int64_t o = 0; o < O; ++o) {
        for (int64_t b = 0; b < B; ++b) {
            r.grad_b.value[o] += g[b * O + o];
            r.grad_b.mag[o] += gm[b * O + o];
            for (int64_t i = 0; i < I; ++i) {
                r.grad_w.value[o * I + i] += g[b * O + o] * x[b * I + i];
                r.grad_w.mag[o * I + i] += gm[b * O + o] * std::fabs(x[b * I + i]);
            }
        }
    }
    return r;
}

}  // namespace shardrec::ref
