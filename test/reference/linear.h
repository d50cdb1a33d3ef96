// Float64 reference of the linear layer (the judge of kernels/linear.h), and the pieces the other
// dense references share: value + magnitude pairs and activations. Plain loops over
// std::vector<double>; no engine dependency.
//
// mag is the expression evaluated on absolute values (inputs |x|, mag(a+b) = mag_a + mag_b,
// mag(a*b) = mag_a * mag_b); a smooth function f, a quotient or a square root contributes
// |f'| mag_in + |f| to first order. For a straight-line program of K dependent roundings the
// computed value is within gamma_K * mag of the exact one, which is what the backend-ops
// tolerance checks with terms = K. For a dot product mag is the usual sum of |terms|.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardrec::ref {

struct DenseValues {
    std::vector<double> value;
    std::vector<double> mag;

    explicit DenseValues(size_t n = 0) : value(n, 0.0), mag(n, 0.0) {}
};

// Plain-loop helpers over DenseValues, used by the layer references.
DenseValues exact(const std::vector<double>& x);  // an input: value x, mag |x|
// C [M, N] = op(A) op(B), row-major; A is [M, K] (or [K, M] when ta), B is [K, N] (or [N, K]
// when tb). Sums over k in order.
DenseValues matmul(
    const DenseValues& a, bool ta, const DenseValues& b, bool tb, int64_t M, int64_t N, int64_t K);
DenseValues add(const DenseValues& a, const DenseValues& b);  // same size
DenseValues mul(const DenseValues& a, const DenseValues& b);  // elementwise
// a [R, C] + bias [C] broadcast over rows
DenseValues add_row_vector(const DenseValues& a, const DenseValues& bias, int64_t R, int64_t C);
// sum over rows of a [R, C] -> [C]
DenseValues sum_rows(const DenseValues& a, int64_t R, int64_t C);

enum class Act { kIdentity, kRelu, kSigmoid };

double act_value(Act act, double z);
// mag of act(z) given z's mag (relu keeps the input's mag even at 0: a tiny positive error in z
// shows up unchanged in the output).
double act_mag(Act act, double z, double mag_z);
// act'(z) from y = act(z), as the kernels compute it, and its mag (y (1 - y) has |y| (1 + |y|)).
double act_grad_from_output(Act act, double y);
double act_grad_mag(Act act, double y);

// y = act(x w^T + bias): x [B, I], w [O, I], bias [O] or empty, y [B, O]. Chain: I + 1 (+ 1 for
// the sigmoid).
DenseValues linear_forward(const std::vector<double>& x,
                           const std::vector<double>& w,
                           const std::vector<double>& bias,
                           int64_t B,
                           int64_t I,
                           int64_t O,
                           Act act);

struct LinearGrads {
    DenseValues grad_x;  // [B, I], chain O + 3
    DenseValues grad_w;  // [O, I], chain B + 3
    DenseValues grad_b;  // [O],    chain B + 3
};

// g = grad_y * act'(y) from the saved output y [B, O]; grad_x = g w, grad_w = g^T x,
// grad_b = sum_b g.
LinearGrads linear_backward(const std::vector<double>& x,
                            const std::vector<double>& w,
                            const std::vector<double>& y,
                            const std::vector<double>& grad_y,
                            int64_t B,
                            int64_t I,
                            int64_t O,
                            Act act);

}  // namespace shardrec::ref
