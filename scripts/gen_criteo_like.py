#!/usr/bin/env python3
"""Criteo-format click logs with a realistic id distribution, from a seed (Python 3 stdlib only).

    scripts/gen_criteo_like.py OUT_DIR --lines N --days D --seed S
        [--profile planted|kaggle] [--max-vocab V] [--alpha LO,HI]

Writes OUT_DIR/day_0 .. day_{D-1}, N/D lines each, in the Criteo click-log format: label, 13
integer fields, 26 categorical fields of 8 hex digits, tab-separated, empty fields where a value
is missing (per-feature missing rates like the real logs'; int_1 takes small negative values).
The same files for the same arguments. Not real data: a stand-in where no Criteo log is at hand.

Categorical feature t draws a rank r from a Zipf(alpha_t) law over a vocabulary of V_t values, so
the head is hot and the tail keeps bringing new values, and writes the value h(seed, t, r) mod 2^32
in hex (h: splitmix64), so `criteo-preprocess --table-sizes`' `v mod rows` collides values as with
the real hashes. Vocabularies up to 200000 are drawn exactly (inverse CDF over the ranks); larger
ones from the continuous power law on [0.5, V + 0.5) rounded to the nearest rank (its head is
within a few % of the exact law's; the exact one would need V floats per feature).
  planted: the vocabularies of scripts/bench_quantized_accuracy.sh (the Kaggle cardinalities, the
           large ones scaled down to 3000-200000), alpha 1.05 above 10000 values, 0.9 below.
  kaggle:  the Criteo Kaggle cardinalities (configs/dlrm_criteo_kaggle.yaml) capped at --max-vocab
           (default 4000000), alpha_t uniform in --alpha (default 1.05,1.2) from h(seed, 4, t).
Integer j is floor(exp(N(mu_j, sigma_j))). The label is Bernoulli(sigmoid(z)) with
  z = b + sum_{j in D} w_j (log(max(x_j, 0) + 1) - mu_j) / sigma_j      (DLRM's log transform)
      + sum_{t in C} a_t e_t(r_t) + c u_6(r_6) u_14(r_14)
D: 4 integer features, C: 8 categorical ones (large and mid vocabularies), e_t, u_t: N(0, 1) per
value from h(seed, t, r) (Box-Muller), 0 where the field is empty; b puts the click rate near
Criteo Kaggle's 0.26. Prints the AUC of the true z on the last day (the ceiling a model can reach)
and, per feature, its vocabulary, alpha and the distinct values the files hold.
"""
import argparse
import math
import os
import random

M64 = (1 << 64) - 1
# Criteo Kaggle (Display Advertising Challenge) cardinalities, as in facebookresearch/dlrm.
KAGGLE = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
          14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
PLANTED = [1460, 583, 200000, 60000, 305, 24, 12517, 633, 3, 40000, 5683, 150000, 3194, 27, 14992,
           120000, 10, 5652, 2173, 4, 100000, 18, 15, 30000, 105, 20000]
EXACT_MAX = 200000


def h(*keys):  # splitmix64 over the keys
    x = 0x9E3779B97F4A7C15
    for k in keys:
        x = (x ^ (k & M64)) * 0xBF58476D1CE4E5B9 & M64
        x = (x + 0x9E3779B97F4A7C15) & M64
        z = x
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & M64
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB & M64
        x = z ^ (z >> 31)
    return x


def gauss(*keys):  # N(0, 1) from two hashes (Box-Muller)
    u1 = ((h(*keys, 1) >> 11) + 1) / 2.0**53
    u2 = (h(*keys, 2) >> 11) / 2.0**53
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


class Memo(dict):  # f(r) computed on first use: only the values drawn, not the whole vocabulary
    def __init__(self, f):
        super().__init__()
        self.f = f

    def __missing__(self, r):
        v = self[r] = self.f(r)
        return v


def sampler(rng, v, alpha):
    if v <= EXACT_MAX:
        acc, cum = 0.0, []
        for r in range(v):
            acc += 1.0 / (r + 1) ** alpha
            cum.append(acc)
        ranks = range(v)
        return lambda n: rng.choices(ranks, cum_weights=cum, k=n)
    e = 1.0 - alpha
    lo, hi = 0.5**e, (v + 0.5)**e

    def draw(n):
        out = []
        for _ in range(n):
            x = (lo + rng.random() * (hi - lo))**(1.0 / e)
            out.append(min(max(int(x + 0.5) - 1, 0), v - 1))
        return out
    return draw


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--lines", type=int, required=True,
                   help="lines in all, split over the days (the first days take the remainder)")
    p.add_argument("--days", type=int, default=1, help="files day_0 .. day_{N-1}")
    p.add_argument("--seed", type=int, default=1, help="the same seed writes the same bytes")
    p.add_argument("--profile", choices=("planted", "kaggle"), default="planted")
    p.add_argument("--max-vocab", type=int, default=4000000,
                   help="most distinct values of a categorical column")
    p.add_argument("--alpha", default="1.05,1.2", help="kaggle: alpha_t range LO,HI")
    a = p.parse_args()
    if a.lines < a.days or a.days < 1:
        p.error("--lines %d must be at least --days %d (>= 1)" % (a.lines, a.days))
    seed = a.seed

    if a.profile == "planted":
        V = PLANTED
        ALPHA = [1.05 if v > 10000 else 0.9 for v in V]
    else:
        lo, hi = (float(x) for x in a.alpha.split(","))
        V = [min(v, a.max_vocab) for v in KAGGLE]
        ALPHA = [lo + (hi - lo) * (h(seed, 4, t) >> 11) / 2.0**53 for t in range(26)]
    CAT_MISSING = [0.0] * 26
    for t, q in ((2, 0.03), (3, 0.03), (11, 0.03), (15, 0.03), (18, 0.44), (19, 0.44),
                 (21, 0.76), (24, 0.44), (25, 0.44), (12, 0.03)):
        CAT_MISSING[t] = q
    INT_MISSING = [0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0, 0.0, 0.45, 0.04, 0.77, 0.22]
    MU = [0.8, 3.0, 2.2, 1.6, 7.5, 3.5, 1.8, 2.3, 3.2, 0.6, 1.2, 0.3, 1.6]
    SIGMA = [1.2, 1.8, 1.0, 1.0, 1.8, 1.6, 1.4, 1.2, 1.0, 0.8, 1.0, 0.9, 1.2]
    DENSE_W = {0: 0.5, 4: -0.4, 7: 0.3, 10: 0.4}
    CAT_A = {2: 0.6, 3: 0.6, 6: 0.6, 9: 0.6, 11: 0.6, 14: 0.6, 20: 0.6, 23: 0.6}
    PAIR, PAIR_C = (6, 14), 0.5
    BIAS = -2.0

    hexes = [Memo(lambda r, t=t: "%08x" % (h(seed, 1, t, r) & 0xFFFFFFFF)) for t in range(26)]
    effect = {t: Memo(lambda r, t=t, c=c: c * gauss(seed, 2, t, r)) for t, c in CAT_A.items()}
    pair_u = {t: Memo(lambda r, t=t: gauss(seed, 3, t, r)) for t in PAIR}
    rng = random.Random(seed)
    draw = [sampler(rng, V[t], ALPHA[t]) for t in range(26)]

    os.makedirs(a.out_dir, exist_ok=True)
    per_day = a.lines // a.days
    last_z, last_y = [], []
    clicks = 0
    for day in range(a.days):
        n = per_day + (1 if day < a.lines % a.days else 0)
        ranks = [draw[t](n) for t in range(26)]
        cat_empty = [[rng.random() < CAT_MISSING[t] for _ in range(n)] if CAT_MISSING[t] else None
                     for t in range(26)]
        with open(os.path.join(a.out_dir, "day_%d" % day), "w") as f:
            for i in range(n):
                z = BIAS
                fields = [None]
                for j in range(13):
                    if rng.random() < INT_MISSING[j]:
                        x, s = 0, ""
                    elif j == 1 and rng.random() < 0.1:
                        x = -rng.randint(1, 3)
                        s = str(x)
                    else:
                        x = int(math.exp(rng.gauss(MU[j], SIGMA[j])))
                        s = str(x)
                    w = DENSE_W.get(j)
                    if w is not None:
                        z += w * (math.log(max(x, 0) + 1) - MU[j]) / SIGMA[j]
                    fields.append(s)
                pu = 1.0
                for t in range(26):
                    if cat_empty[t] is not None and cat_empty[t][i]:
                        fields.append("")
                        if t in PAIR:
                            pu = 0.0
                        continue
                    r = ranks[t][i]
                    fields.append(hexes[t][r])
                    e = effect.get(t)
                    if e is not None:
                        z += e[r]
                    if t in PAIR:
                        pu *= pair_u[t][r]
                z += PAIR_C * pu
                y = 1 if rng.random() < 1.0 / (1.0 + math.exp(-z)) else 0
                clicks += y
                fields[0] = str(y)
                f.write("\t".join(fields))
                f.write("\n")
                if day == a.days - 1:
                    last_z.append(z)
                    last_y.append(y)

    # AUC of the true logit on the last day (rank-sum, ties averaged).
    order = sorted(range(len(last_z)), key=last_z.__getitem__)
    rank_sum, i = 0.0, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and last_z[order[j + 1]] == last_z[order[i]]:
            j += 1
        for k in range(i, j + 1):
            if last_y[order[k]]:
                rank_sum += (i + j) / 2.0 + 1
        i = j + 1
    pos = sum(last_y)
    neg = len(last_y) - pos
    auc = (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg) if pos and neg else float("nan")
    print("lines %d, days %d, click rate %.4f, planted-signal AUC on the last day %.6f"
          % (a.lines, a.days, clicks / a.lines, auc))
    if a.profile == "kaggle":
        print("feature,vocabulary,alpha,distinct_values_written")
        for t in range(26):
            print("cat_%d,%d,%.4f,%d" % (t, V[t], ALPHA[t], len(hexes[t])))


if __name__ == "__main__":
    main()
