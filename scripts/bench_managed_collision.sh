#!/usr/bin/env bash
# Managed collision against `raw id mod rows` at the same table size, on the synthetic drifting
# vocabulary (README "Managed collision"). The quickstart model, one process; tables t0 and t7
# take raw ids (data.synthetic.raw_id_drift: a new id every DRIFT samples, Zipf over VOCAB live
# entries, the planted signal on the raw id). First a run with 1 M slots per table (never full)
# counts the distinct raw ids each table sees (its last occupancy); then, for rows = 1/8, 1/4,
# 1/2 and 1x that count, one run with managed_collision (zch_size = rows, mch_size 0: the last
# slot is the fallback row, EVICTION_POLICY every EVICTION_INTERVAL steps) and one with plain
# tables fed `raw id mod rows` (data.synthetic.raw_id_mod_tables), the same samples and labels.
# The eval split draws the vocabulary of the last EVAL samples of training (raw_id_eval_offset).
#   scripts/bench_managed_collision.sh [out_dir]     (BUILD_DIR, STEPS, DRIFT, VOCAB, ...)
# Writes results.csv (per seed: final eval AUC and loss, the last record's hit_fraction) and the
# runs' logs. About 3 minutes on 2 cores with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/provenance.sh
bin=${BUILD_DIR:-build}/shardrec
out=${1:-bench/results/mc-auc-$(date -u +%Y%m%d)}
steps=${STEPS:-1000}
drift=${DRIFT:-64}
vocab=${VOCAB:-20000}
eval_samples=${EVAL:-16384}
policy=${EVICTION_POLICY:-distance_lfu}
interval=${EVICTION_INTERVAL:-20}
seeds=${SEEDS:-1 2 3}  # train.seed: the samples, labels and initial values
batch=256  # configs/quickstart.yaml
mkdir -p "$out/runs"
save_provenance "$out"

common=(--set "train.steps=$steps" --set "train.eval_every=$steps" --set "train.log_every=$steps"
    --set "train.eval_samples=$eval_samples"
    --set "data.synthetic.raw_id_drift=$drift" --set "data.synthetic.raw_id_vocabulary=$vocab"
    --set "data.synthetic.raw_id_eval_offset=$((steps * batch - eval_samples))")
tables=(0 7)  # t0 (1 id a sample), t7 (2 ids a sample)

managed() {  # managed ROWS0 ROWS7: the override args
    local rows=("$1" "$2") i
    for i in 0 1; do
        local t=${tables[$i]} r=${rows[$i]}
        echo "--set model.tables[$t].num_embeddings=$r --set model.tables[$t].managed_collision.zch_size=$r"
        echo "--set model.tables[$t].managed_collision.mch_size=0"
        echo "--set model.tables[$t].managed_collision.eviction_policy=$policy"
        echo "--set model.tables[$t].managed_collision.eviction_interval=$interval"
    done
}

run() {  # run NAME ARGS...: trains into runs/NAME, prints "auc loss wall_s"
    local name=$1
    shift
    rm -rf "$out/runs/$name"
    local t0=$SECONDS
    "$bin" train configs/quickstart.yaml --out "$out/runs/$name" "${common[@]}" "$@" \
        > "$out/runs/$name.log" 2>&1
    python3 - "$out/runs/$name/metrics.jsonl" $((SECONDS - t0)) <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in recs if r["kind"] == "eval"][-1]
mc = {}
for r in recs:
    if r["kind"] == "managed_collision":
        mc[r["table"]] = r
print(ev["auc"], ev["loss"], sys.argv[2],
      " ".join(str(mc[t]["hit_fraction"]) if t in mc else "" for t in ("t0", "t7")),
      " ".join(str(mc[t]["occupancy"]) if t in mc else "" for t in ("t0", "t7")))
PY
}

# Distinct raw ids per table: the occupancy of 1 M never-full slots.
read -r auc loss wall h0 h7 d0 d7 <<< "$(run distinct $(managed 1048576 1048576))"
echo "distinct raw ids: t0 $d0, t7 $d7 (1 M slots: auc $auc)"
csv=$out/results.csv
echo "seed,fraction,rows_t0,rows_t7,method,auc,eval_loss,hit_fraction_t0,hit_fraction_t7,wall_s" \
    > "$csv"
echo "1,unbounded,1048576,1048576,managed_collision,$auc,$loss,$h0,$h7,$wall" >> "$csv"
for seed in $seeds; do
    for frac in 8 4 2 1; do
        r0=$(((d0 + frac - 1) / frac))
        r7=$(((d7 + frac - 1) / frac))
        read -r auc loss wall h0 h7 _ <<< \
            "$(run "mc-1of$frac-s$seed" --set "train.seed=$seed" $(managed "$r0" "$r7"))"
        echo "$seed,1/$frac,$r0,$r7,managed_collision,$auc,$loss,$h0,$h7,$wall" >> "$csv"
        read -r auc loss wall _ <<< "$(run "mod-1of$frac-s$seed" --set "train.seed=$seed" \
            --set "model.tables[0].num_embeddings=$r0" --set "model.tables[7].num_embeddings=$r7" \
            --set "data.synthetic.raw_id_mod_tables=[t0, t7]")"
        echo "$seed,1/$frac,$r0,$r7,mod,$auc,$loss,,,$wall" >> "$csv"
        tail -2 "$csv"
    done
done
rm -rf "$out"/runs/*/checkpoints
echo "wrote $csv"
