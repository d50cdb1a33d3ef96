#!/usr/bin/env bash
# Accuracy of quantized models (README "Inference": ckpt quantize, eval --model) on Criteo-format
# data with a planted signal: AUC, NE, calibration and table bytes of f32, fp16, int8, fp8, int4
# and int4 with the small tables int8, next to the f32 checkpoint, on the same held-out day.
#   scripts/bench_quantized_accuracy.sh [out_dir]     (BUILD_DIR, STEPS, LINES, DAYS, SEED, NP)
# Writes out_dir/results.csv, table.md (its Markdown table), the runs' logs and provenance.txt; the TSV, the shards, the
# checkpoint and the models go to a scratch directory (WORK, default a mktemp dir, removed).
# About 4 minutes on 2 shared cores with the defaults.
#
# The generator (Python 3 stdlib, below): DAYS files day_0 .. day_{DAYS-1} of LINES/DAYS lines
# each, the Criteo click-log format: label, 13 integer fields, 26 categorical fields of 8 hex
# digits, tab-separated, empty fields where a value is missing (per-feature missing rates like
# the real logs'; int_1 takes small negative values). Categorical feature t draws a rank r from a
# Zipf(alpha_t) law over a vocabulary of V_t values (sizes shaped as the Kaggle data's, scaled
# down), so rows repeat, and writes the value h(seed, t, r) mod 2^32 in hex (h: splitmix64), so
# `--table-sizes`' `v mod rows` collides values as with the real hashes. Integer j is
# floor(exp(N(mu_j, sigma_j))). The label is Bernoulli(sigmoid(z)) with
#   z = b + sum_{j in D} w_j (log(max(x_j, 0) + 1) - mu_j) / sigma_j      (DLRM's log transform)
#       + sum_{t in C} a_t e_t(r_t) + c u_6(r_6) u_14(r_14)
# D: 4 integer features, C: 8 categorical ones (large and mid vocabularies), e_t, u_t: N(0, 1)
# per value from h(seed, t, r) (Box-Muller), 0 where the field is empty; b puts the click rate
# near Criteo Kaggle's 0.26. Everything is a function of SEED: the same files for the same seed.
# The generator prints the AUC of the true z on the last day (the ceiling a model can reach).
#
# Then: criteo-preprocess with those table sizes (capped by --max-ind-range 100000), train
# configs/dlrm_criteo_planted.yaml (the last day is the eval split, data.criteo_binary.eval_days
# 1) on NP ranks, quantize its last checkpoint in every format and `eval --model` each on NP ranks
# (each run also evaluates the f32 checkpoint on the same samples).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/provenance.sh
bin=$(realpath "${BUILD_DIR:-build}")/shardrec
out=${1:-bench/results/quant-accuracy-$(date -u +%Y%m%d)}
steps=${STEPS:-3000}
lines=${LINES:-1000000}
days=${DAYS:-5}
seed=${SEED:-1}
np=${NP:-2}
config=configs/dlrm_criteo_planted.yaml
max_ind_range=100000
work=${WORK:-$(mktemp -d)}
[[ -n ${WORK:-} ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work"
save_provenance "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe -np "$np")

t0=$SECONDS
python3 - "$work/tsv" "$lines" "$days" "$seed" > "$out/generate.log" <<'PY'
import math, os, random, sys

out_dir, lines, days, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
M64 = (1 << 64) - 1

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

# Vocabularies: the Kaggle cardinalities, the large ones scaled down.
V = [1460, 583, 200000, 60000, 305, 24, 12517, 633, 3, 40000, 5683, 150000, 3194, 27, 14992,
     120000, 10, 5652, 2173, 4, 100000, 18, 15, 30000, 105, 20000]
ALPHA = [1.05 if v > 10000 else 0.9 for v in V]
CAT_MISSING = [0.0] * 26
for t, p in ((2, 0.03), (3, 0.03), (11, 0.03), (15, 0.03), (18, 0.44), (19, 0.44), (21, 0.76),
             (24, 0.44), (25, 0.44), (12, 0.03)):
    CAT_MISSING[t] = p
INT_MISSING = [0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0, 0.0, 0.45, 0.04, 0.77, 0.22]
MU = [0.8, 3.0, 2.2, 1.6, 7.5, 3.5, 1.8, 2.3, 3.2, 0.6, 1.2, 0.3, 1.6]
SIGMA = [1.2, 1.8, 1.0, 1.0, 1.8, 1.6, 1.4, 1.2, 1.0, 0.8, 1.0, 0.9, 1.2]
DENSE_W = {0: 0.5, 4: -0.4, 7: 0.3, 10: 0.4}
CAT_A = {2: 0.6, 3: 0.6, 6: 0.6, 9: 0.6, 11: 0.6, 14: 0.6, 20: 0.6, 23: 0.6}
PAIR, PAIR_C = (6, 14), 0.5
BIAS = -2.0

hexes = [["%08x" % (h(seed, 1, t, r) & 0xFFFFFFFF) for r in range(V[t])] for t in range(26)]
effect = {t: [a * gauss(seed, 2, t, r) for r in range(V[t])] for t, a in CAT_A.items()}
pair_u = {t: [gauss(seed, 3, t, r) for r in range(V[t])] for t in PAIR}
cum = []
for t in range(26):
    acc, c = 0.0, []
    for r in range(V[t]):
        acc += 1.0 / (r + 1) ** ALPHA[t]
        c.append(acc)
    cum.append(c)

os.makedirs(out_dir, exist_ok=True)
per_day = lines // days
rng = random.Random(seed)
last_z, last_y = [], []
clicks = 0
for day in range(days):
    n = per_day
    ranks = [rng.choices(range(V[t]), cum_weights=cum[t], k=n) for t in range(26)]
    cat_empty = [[rng.random() < CAT_MISSING[t] for _ in range(n)] if CAT_MISSING[t] else None
                 for t in range(26)]
    with open(os.path.join(out_dir, "day_%d" % day), "w") as f:
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
            if day == days - 1:
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
auc = (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg)
print("lines %d, days %d, click rate %.4f, planted-signal AUC on the last day %.6f"
      % (per_day * days, days, clicks / (per_day * days), auc))
PY
cat "$out/generate.log"
echo "generated in $((SECONDS - t0)) s"

t0=$SECONDS
sizes=1460,583,200000,60000,305,24,12517,633,3,40000,5683,150000,3194,27,14992,120000,10,5652,2173,4,100000,18,15,30000,105,20000
"$bin" data criteo-preprocess --in $(for ((d = 0; d < days; ++d)); do echo "$work/tsv/day_$d"; done) \
    --out "$work/data" --table-sizes "$sizes" --max-ind-range "$max_ind_range" \
    > "$out/preprocess.log" 2>&1
rm -rf "$work/tsv"
echo "preprocessed in $((SECONDS - t0)) s"

t0=$SECONDS
set_data=(--set "data.criteo_binary.path=$work/data")
rm -rf "$work/run"
"${mpi[@]}" "$bin" train "$config" --out "$work/run" "${set_data[@]}" \
    --set "train.steps=$steps" --set "train.checkpoint_every=$steps" > "$out/train.log" 2>&1
grep '"kind":"eval"' "$work/run/metrics.jsonl" > "$out/train_eval.jsonl" || true
echo "trained $steps steps in $((SECONDS - t0)) s: $(tail -1 "$out/train_eval.jsonl")"

ckpt=$work/run/checkpoints
small=$(python3 - "$config" "$max_ind_range" <<'PY'
import re, sys
# The tables below 10000 rows: int8 in the int4 mix (they are cheap, and the most used rows).
rows = re.findall(r"name: (t_cat_\d+), num_embeddings: (\d+)", open(sys.argv[1]).read())
print(",".join("%s=int8" % n for n, r in rows if int(r) < 10000))
PY
)
csv=$out/results.csv
echo "model,weights,table_overrides,auc,ne,calibration,loss,count,f32_auc,f32_ne,f32_calibration,auc_delta,table_bytes,f32_table_bytes,model_bytes,f32_model_bytes" > "$csv"
variants=("f32:f32:" "fp16:fp16:" "int8:int8:" "fp8:fp8:" "int4:int4:" "int4_small_int8:int4:$small")
for v in "${variants[@]}"; do
    IFS=: read -r name weights tables <<< "$v"
    t0=$SECONDS
    rm -rf "$work/model_$name"
    "$bin" ckpt quantize "$ckpt" --out "$work/model_$name" --weights "$weights" \
        ${tables:+--tables "$tables"} > "$out/quantize_$name.log" 2>&1
    "${mpi[@]}" "$bin" eval "$work/run/config.yaml" --model "$work/model_$name" "${set_data[@]}" \
        > "$out/eval_$name.log" 2>&1
    python3 - "$out/eval_$name.log" "$work/model_$name" "$name" "$tables" >> "$csv" <<'PY'
import json, os, sys
log, model, name, overrides = sys.argv[1:5]
r = [json.loads(l) for l in open(log) if l.startswith('{"kind":"eval_quantized"')][-1]
def dir_bytes(d):  # the model's table files (tables/) or dense parameters (dense/)
    d = os.path.join(model, d)
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
tb, dense = dir_bytes("tables"), dir_bytes("dense")
assert tb + dense == r["bytes"], (tb, dense, r["bytes"])
print(",".join(str(x) for x in (
    name, r["weights"], '"%s"' % overrides, r["auc"], r["ne"], r["calibration"], r["loss"],
    r["count"], r["f32_auc"], r["f32_ne"], r["f32_calibration"], "%.7f" % (r["auc"] - r["f32_auc"]),
    tb, r["f32_bytes"] - dense, r["bytes"], r["f32_bytes"])))
PY
    echo "$name: $(tail -1 "$csv") ($((SECONDS - t0)) s)"
done
python3 - "$csv" > "$out/table.md" <<'PY'
import csv, sys
print("| model | AUC | AUC - f32 | NE | calibration | table MB | x smaller than f32 |")
print("|---|---|---|---|---|---|---|")
for r in csv.DictReader(open(sys.argv[1])):
    name = r["model"] + (" (%s)" % r["table_overrides"] if r["table_overrides"] else "")
    print("| %s | %.6f | %+.7f | %.6f | %.6f | %.2f | %.2f |" % (
        name, float(r["auc"]), float(r["auc"]) - float(r["f32_auc"]), float(r["ne"]),
        float(r["calibration"]), int(r["table_bytes"]) / 1e6,
        int(r["f32_table_bytes"]) / int(r["table_bytes"])))
PY
cat "$out/table.md"
echo "wrote $csv"
