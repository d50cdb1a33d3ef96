#include "test/reference/crossnet.h"

namespace shardrec::ref {

CrossNetForward crossnet_forward(const std::vector<double>& x0,
                                 const std::vector<double>& xl,
                                 const std::vector<double>& w,
                                 const std::vector<double>& v,
                                 const std::vector<double>& bias,
                                 int64_t B,
                                 int64_t N,
                                 int64_t r) {
    const DenseValues X0 = exact(x0), XL = exact(xl), W = exact(w);
    CrossNetForward f;
    DenseValues xw;
    if (v.empty()) {
        xw = matmul(XL, false, W, true, B, N, N);
    } else {
        f.vx = matmul(XL, false, exact(v), true, B, r, N);
        xw = matmul(f.vx, false, W, true, B, N, r);
    }
    f.u = add_row_vector(xw, exact(bias), B, N);
    f.out = add(mul(X0, f.u), XL);
    return f;
}

CrossNetGrads crossnet_backward(const std::vector<double>& x0,
                                const std::vector<double>& xl,
                                const std::vector<double>& w,
                                const std::vector<double>& v,
                                const std::vector<double>& u,
                                const std::vector<double>& vx,
                                const std::vector<double>& grad_out,
                                const std::vector<double>& grad_x0_init,
                                int64_t B,
                                int64_t N,
                                int64_t r) {
    const DenseValues GO = exact(grad_out), XL = exact(xl), W = exact(w);
    const DenseValues gu = mul(GO, exact(x0));  // d loss / d u
    CrossNetGrads g;
    g.grad_x0 = add(exact(grad_x0_init), mul(GO, exact(u)));
    g.grad_b = sum_rows(gu, B, N);
    if (v.empty()) {
        g.grad_w = matmul(gu, true, XL, false, N, N, B);
        g.grad_xl = add(GO, matmul(gu, false, W, false, B, N, N));
        return g;
    }
    const DenseValues gv = matmul(gu, false, W, false, B, r, N);  // d loss / d vx
    g.grad_w = matmul(gu, true, exact(vx), false, N, r, B);
    g.grad_v = matmul(gv, true, XL, false, r, N, B);
    g.grad_xl = add(GO, matmul(gv, false, exact(v), false, B, N, r));
    return g;
}

}  // namespace shardrec::ref
