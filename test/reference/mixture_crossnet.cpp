#include "test/reference/mixture_crossnet.h"

#include <algorithm>
#include <cmath>

namespace shardrec::ref {
namespace {

// Softmax of z [K] with first-order mags: dp_k = p_k (dz_k - sum_j p_j dz_j), plus rounding.
void softmax_mag(const std::vector<double>& z,
                 const std::vector<double>& mz,
                 double* p,
                 double* mp) {
    const size_t K = z.size();
    const double mx = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (size_t k = 0; k < K; ++k) {
        sum += std::exp(z[k] - mx);
    }
    double mean_mz = 0;
    for (size_t k = 0; k < K; ++k) {
        p[k] = std::exp(z[k] - mx) / sum;
        mean_mz += p[k] * mz[k];
    }
    for (size_t k = 0; k < K; ++k) {
        mp[k] = p[k] * (mz[k] + mean_mz) + p[k];
    }
}

// Expert k of row b: a1, a2 and e (bias included) into f.
void expert_forward(const MixtureCrossNetParams& p,
                    const std::vector<double>& xl,
                    int64_t b,
                    int64_t k,
                    MixtureCrossNetForward& f) {
    const int64_t N = p.N, K = p.K, r = p.r;
    const int64_t base = (b * K + k) * r;  // a1/a2[b, k, :]
    for (int64_t j = 0; j < r; ++j) {
        double z = 0, mz = 0;
        for (int64_t n = 0; n < N; ++n) {
            z += xl[b * N + n] * p.v[(k * r + j) * N + n];
            mz += std::fabs(xl[b * N + n] * p.v[(k * r + j) * N + n]);
        }
        f.a1.value[base + j] = act_value(p.act, z);
        f.a1.mag[base + j] = act_mag(p.act, z, mz);
    }
    for (int64_t j = 0; j < r; ++j) {
        double z = 0, mz = 0;
        for (int64_t i = 0; i < r; ++i) {
            z += f.a1.value[base + i] * p.c[(k * r + j) * r + i];
            mz += f.a1.mag[base + i] * std::fabs(p.c[(k * r + j) * r + i]);
        }
        f.a2.value[base + j] = act_value(p.act, z);
        f.a2.mag[base + j] = act_mag(p.act, z, mz);
    }
    for (int64_t n = 0; n < N; ++n) {
        double z = p.bias[n], mz = std::fabs(p.bias[n]);
        for (int64_t j = 0; j < r; ++j) {
            z += f.a2.value[base + j] * p.u[(k * N + n) * r + j];
            mz += f.a2.mag[base + j] * std::fabs(p.u[(k * N + n) * r + j]);
        }
        f.e.value[(b * K + k) * N + n] = z;
        f.e.mag[(b * K + k) * N + n] = mz;
    }
}

// The gate probabilities of row b (all 1 with mag 1 when K = 1), stored into f when K > 1.
void gate_forward(const MixtureCrossNetParams& p,
                  const std::vector<double>& xl,
                  int64_t b,
                  std::vector<double>& prob,
                  std::vector<double>& mprob,
                  MixtureCrossNetForward& f) {
    const int64_t N = p.N, K = p.K;
    prob.assign(static_cast<size_t>(K), 1.0);
    mprob.assign(static_cast<size_t>(K), 1.0);
    if (K == 1) {
        return;
    }
    std::vector<double> z(static_cast<size_t>(K)), mz(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) {
            z[k] += xl[b * N + n] * p.gates[k * N + n];
            mz[k] += std::fabs(xl[b * N + n] * p.gates[k * N + n]);
        }
    }
    softmax_mag(z, mz, prob.data(), mprob.data());
    for (int64_t k = 0; k < K; ++k) {
        f.probs.value[b * K + k] = prob[k];
        f.probs.mag[b * K + k] = mprob[k];
    }
}

}  // namespace

MixtureCrossNetForward mixture_crossnet_forward(const MixtureCrossNetParams& p,
                                                const std::vector<double>& x0,
                                                const std::vector<double>& xl) {
    const int64_t B = p.B, N = p.N, K = p.K, r = p.r;
    MixtureCrossNetForward f{
        DenseValues(static_cast<size_t>(B * N)), DenseValues(static_cast<size_t>(B * K * r)),
        DenseValues(static_cast<size_t>(B * K * r)), DenseValues(static_cast<size_t>(B * K * N)),
        DenseValues(static_cast<size_t>(K > 1 ? B * K : 0))};
    std::vector<double> prob, mprob;
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t k = 0; k < K; ++k) {
            expert_forward(p, xl, b, k, f);
        }
        gate_forward(p, xl, b, prob, mprob, f);
        for (int64_t n = 0; n < N; ++n) {
            double o = xl[b * N + n], mo = std::fabs(xl[b * N + n]);
            for (int64_t k = 0; k < K; ++k) {
                const int64_t ie = (b * K + k) * N + n;
                o += prob[k] * x0[b * N + n] * f.e.value[ie];
                mo += mprob[k] * std::fabs(x0[b * N + n] * f.e.value[ie]) +
                      prob[k] * std::fabs(x0[b * N + n]) * f.e.mag[ie];
            }
            f.out.value[b * N + n] = o;
            f.out.mag[b * N + n] = mo;
        }
    }
    return f;
}

namespace {

// Gate part (K > 1): gw_k = grad_out . (x0 * e_k), gz_k = p_k (gw_k - sum_j p_j gw_j);
// grad_gates += gz^T xl, grad_xl += gz G.
void gate_backward(const MixtureCrossNetParams& p,
                   const std::vector<double>& x0,
                   const std::vector<double>& xl,
                   const MixtureCrossNetSavedValues& s,
                   const std::vector<double>& grad_out,
                   MixtureCrossNetGrads& g) {
    const int64_t B = p.B, N = p.N, K = p.K;
    for (int64_t b = 0; b < B; ++b) {
        std::vector<double> gw(static_cast<size_t>(K)), mgw(static_cast<size_t>(K));
        double mean = 0, mmean = 0;
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t n = 0; n < N; ++n) {
                const double t = grad_out[b * N + n] * x0[b * N + n] * s.e[(b * K + k) * N + n];
                gw[k] += t;
                mgw[k] += std::fabs(t);
            }
            mean += s.probs[b * K + k] * gw[k];
            mmean += s.probs[b * K + k] * mgw[k];
        }
        for (int64_t k = 0; k < K; ++k) {
            const double pk = s.probs[b * K + k];
            const double gz = pk * (gw[k] - mean), mgz = pk * (mgw[k] + mmean);
            for (int64_t n = 0; n < N; ++n) {
                g.gates.value[k * N + n] += gz * xl[b * N + n];
                g.gates.mag[k * N + n] += mgz * std::fabs(xl[b * N + n]);
                g.xl.value[b * N + n] += gz * p.gates[k * N + n];
                g.xl.mag[b * N + n] += mgz * std::fabs(p.gates[k * N + n]);
            }
        }
    }
}

// One expert k: ge = p_k grad_out x0 -> grad_U, gq -> grad_C, gp -> grad_V and grad_xl.
void expert_backward(const MixtureCrossNetParams& p,
                     int64_t k,
                     const std::vector<double>& x0,
                     const std::vector<double>& xl,
                     const MixtureCrossNetSavedValues& s,
                     const std::vector<double>& grad_out,
                     MixtureCrossNetGrads& g) {
    const int64_t B = p.B, N = p.N, K = p.K, r = p.r;
    DenseValues ge(static_cast<size_t>(B * N)), gq(static_cast<size_t>(B * r)),
        gp(static_cast<size_t>(B * r));
    for (int64_t b = 0; b < B; ++b) {
        const double pk = K > 1 ? s.probs[b * K + k] : 1.0;
        for (int64_t n = 0; n < N; ++n) {
            const int64_t i = b * N + n;
            ge.value[i] = pk * grad_out[i] * x0[i];
            ge.mag[i] = std::fabs(ge.value[i]);
            g.x0.value[i] += pk * grad_out[i] * s.e[(b * K + k) * N + n];
            g.x0.mag[i] += std::fabs(pk * grad_out[i] * s.e[(b * K + k) * N + n]);
            g.bias.value[n] += ge.value[i];
            g.bias.mag[n] += ge.mag[i];
        }
    }
    auto a_at = [&](const std::vector<double>& a, int64_t b, int64_t j) {
        return a[(b * K + k) * r + j];
    };
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < r; ++j) {
            double t = 0, mt = 0;
            for (int64_t n = 0; n < N; ++n) {
                t += ge.value[b * N + n] * p.u[(k * N + n) * r + j];
                mt += ge.mag[b * N + n] * std::fabs(p.u[(k * N + n) * r + j]);
            }
            gq.value[b * r + j] = t * act_grad_from_output(p.act, a_at(s.a2, b, j));
            gq.mag[b * r + j] = mt * act_grad_mag(p.act, a_at(s.a2, b, j));
        }
        for (int64_t i = 0; i < r; ++i) {
            double t = 0, mt = 0;
            for (int64_t j = 0; j < r; ++j) {
                t += gq.value[b * r + j] * p.c[(k * r + j) * r + i];
                mt += gq.mag[b * r + j] * std::fabs(p.c[(k * r + j) * r + i]);
            }
            gp.value[b * r + i] = t * act_grad_from_output(p.act, a_at(s.a1, b, i));
            gp.mag[b * r + i] = mt * act_grad_mag(p.act, a_at(s.a1, b, i));
        }
    }
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < r; ++j) {
            for (int64_t n = 0; n < N; ++n) {
                const int64_t iu = (k * N + n) * r + j, iv = (k * r + j) * N + n;
                g.u.value[iu] += ge.value[b * N + n] * a_at(s.a2, b, j);
                g.u.mag[iu] += ge.mag[b * N + n] * std::fabs(a_at(s.a2, b, j));
                g.v.value[iv] += gp.value[b * r + j] * xl[b * N + n];
                g.v.mag[iv] += gp.mag[b * r + j] * std::fabs(xl[b * N + n]);
                g.xl.value[b * N + n] += gp.value[b * r + j] * p.v[iv];
                g.xl.mag[b * N + n] += gp.mag[b * r + j] * std::fabs(p.v[iv]);
            }
            for (int64_t i = 0; i < r; ++i) {
                g.c.value[(k * r + j) * r + i] += gq.value[b * r + j] * a_at(s.a1, b, i);
                g.c.mag[(k * r + j) * r + i] += gq.mag[b * r + j] * std::fabs(a_at(s.a1, b, i));
            }
        }
    }
}

}  // namespace

MixtureCrossNetGrads mixture_crossnet_backward(const MixtureCrossNetParams& p,
                                               const std::vector<double>& x0,
                                               const std::vector<double>& xl,
                                               const MixtureCrossNetSavedValues& saved,
                                               const std::vector<double>& grad_out,
                                               const std::vector<double>& grad_x0_init,
                                               const std::vector<double>& grad_gates_init) {
    const int64_t N = p.N, K = p.K, r = p.r;
    MixtureCrossNetGrads g{exact(grad_x0_init),
                           exact(grad_out),
                           DenseValues(static_cast<size_t>(K * N * r)),
                           DenseValues(static_cast<size_t>(K * r * r)),
                           DenseValues(static_cast<size_t>(K * r * N)),
                           DenseValues(static_cast<size_t>(N)),
                           exact(grad_gates_init)};
    if (K > 1) {
        gate_backward(p, x0, xl, saved, grad_out, g);
    }
    for (int64_t k = 0; k < K; ++k) {
        expert_backward(p, k, x0, xl, saved, grad_out, g);
    }
    return g;
}

}  // namespace shardrec::ref
