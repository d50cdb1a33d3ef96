#!/usr/bin/env bash
# `shardrec predict` throughput by placement of the tables: the quickstart trained 300 steps on 2
# ranks, quantized to int8, then scored SAMPLES synthetic samples RUNS times each by 1 rank (the
# whole model), and by NP ranks with the model --replicated, sharded by the quickstart's plan,
# every table row_wise (rows fetched to the samples' ranks) and every table table_wise. Writes
# results_<mode>.jsonl (predict's JSON lines) and summary.txt with provenance.
#   scripts/bench_predict.sh [OUT_DIR]   (default bench/results/predict-<date>)
# Environment: NP (2), SAMPLES (262144), RUNS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-bench/results/predict-$(date +%Y%m%d)}
build_dir=${BUILD_DIR:-build}
np=${NP:-2}
samples=${SAMPLES:-262144}
runs=${RUNS:-3}
source scripts/provenance.sh
prepare_bench "$out" "$build_dir"
bin="$build_dir/shardrec"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mpirun -np 2 "${mpi_flags[@]}" "$bin" train configs/quickstart.yaml --out "$work/run" \
    --set train.steps=300 --set train.eval_every=0 --set train.checkpoint_every=300 \
    > "$out/train.log" 2>&1
"$bin" ckpt quantize "$work/run/checkpoints" --out "$work/model" --weights int8 \
    > "$out/quantize.log" 2>&1

# mode, ranks, extra arguments
modes=("1_whole 1"
       "${np}_replicated $np --replicated"
       "${np}_sharded_plan $np"
       "${np}_row_wise $np --set sharding.sharding_type=row_wise --set sharding.tables=[]"
       "${np}_table_wise $np --set sharding.sharding_type=table_wise --set sharding.tables=[]")
for m in "${modes[@]}"; do
    read -r name ranks extra <<< "$m"
    rm -f "$out/results_$name.jsonl"
    for _ in $(seq "$runs"); do
        # shellcheck disable=SC2086
        mpirun -np "$ranks" "${mpi_flags[@]}" "$bin" predict "$work/model" --data synthetic \
            --samples "$samples" --out "$work/scores.bin" $extra > "$work/predict.log" 2>&1
        grep '^{"kind":"predict"' "$work/predict.log" >> "$out/results_$name.jsonl"
    done
done

{
    echo "predict, int8 quickstart model, $samples synthetic samples, $runs runs each ($(provenance))"
    printf '%-20s %-40s %s\n' mode "samples/s" "table MB on the largest rank"
    for m in "${modes[@]}"; do
        read -r name _ <<< "$m"
        rates=$(grep -o '"samples_per_s":[0-9.]*' "$out/results_$name.jsonl" | cut -d: -f2 |
                awk '{printf "%s%.0fk", (NR > 1 ? ", " : ""), $1 / 1000}')
        mb=$(grep -o '"table_mb_per_rank":[0-9.]*' "$out/results_$name.jsonl" | head -1 |
             cut -d: -f2)
        printf '%-20s %-40s %.2f\n' "$name" "$rates" "$mb"
    done
} | tee "$out/summary.txt"
