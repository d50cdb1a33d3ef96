#!/usr/bin/env bash
# Accuracy of quantized models (README "Inference": ckpt quantize, eval --model) on Criteo-format
# data with a planted signal: AUC, NE, calibration and table bytes of f32, fp16, int8, fp8, int4
# and int4 with the small tables int8, next to the f32 checkpoint, on the same held-out day.
#   scripts/bench_quantized_accuracy.sh [out_dir]     (BUILD_DIR, STEPS, LINES, DAYS, SEED, NP)
# Writes out_dir/results.csv, table.md (its Markdown table), the runs' logs and provenance.txt; the TSV, the shards, the
# checkpoint and the models go to a scratch directory (WORK, default a mktemp dir, removed).
# About 4 minutes on 2 shared cores with the defaults.
#
# The generator: scripts/gen_criteo_like.py (--profile planted, its docstring has the law): DAYS
# files of LINES/DAYS lines in the Criteo click-log format, Zipf ids over vocabularies shaped as
# the Kaggle data's (scaled down) and a label with a planted signal (logistic in 4 integer
# features, 8 categorical ones and one pair); it prints the AUC of the true logit on the last
# day (the ceiling a model can reach). Everything is a function of SEED.
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
python3 scripts/gen_criteo_like.py "$work/tsv" --lines "$lines" --days "$days" --seed "$seed" \
    > "$out/generate.log"
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
