#!/usr/bin/env bash
# Inference tools on a model larger than this machine's memory: the MLPerf DLRM-DCNv2 at its real
# table sizes (204 M rows of dim 128, 104 GB of f32 rows) trained STEPS steps with key_value
# tables (as scripts/bench_mlperf_key_value.sh), then `ckpt quantize --weights int8`, `eval
# --model` (the int8 model next to its f32 checkpoint, key_value tables reading the int8 rows as
# the lookups need them) and `predict` (the int8 tables mapped from the model directory, sharded
# over the ranks). Records each command's wall time, peak RSS (/usr/bin/time) and largest
# anonymous memory (RssAnon, sampled), the model's bytes, and the logs; the model and the row
# files are removed at the end.
#   scripts/bench_mlperf_quantize.sh [OUT_DIR]   (default bench/results/mlperf-quantize-<date>)
# Environment: NP (2), BATCH (per rank, 256), STEPS (40), LOAD_FACTOR (0.01), WORK (a local
# directory for the rows, the checkpoint and the model, about 35 GB; default OUT_DIR/work).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-bench/results/mlperf-quantize-$(date +%Y%m%d)}
build_dir=${BUILD_DIR:-build}
work=${WORK:-$out/work}
np=${NP:-2}
steps=${STEPS:-40}
source scripts/provenance.sh
prepare_bench "$out" "$build_dir"
mkdir -p "$work"
bin="$build_dir/shardrec"
timed=(/usr/bin/time -f "peak RSS %M KB (process)")
rm -rf "$work/run" "$work/model" "$work/storage" "$out/summary.txt"

# The largest anonymous memory (RssAnon) of any shardrec process while a step runs: peak RSS
# also counts the pages of mapped files (the model's rows a lookup touched), which the kernel
# drops under pressure.
sample_anon() {
    local max=0 now p
    while [ -e "$out/.sampling" ]; do
        for p in $(pgrep -x shardrec); do
            now=$(awk '/^RssAnon/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
            [ "${now:-0}" -gt "$max" ] && max=$now && echo "$max" > "$out/$1.anon_kb"
        done
        sleep 2
    done
}

step() {  # name, command...: runs it with its log in OUT/name.log, wall time in summary.txt
    local name=$1 t0 sampler
    shift
    touch "$out/.sampling"
    sample_anon "$name" &
    sampler=$!
    t0=$(date +%s)
    "$@" > "$out/$name.log" 2>&1 || {
        rm -f "$out/.sampling"
        wait "$sampler"
        echo "$name failed: see $out/$name.log" >&2
        exit 1
    }
    rm -f "$out/.sampling"
    wait "$sampler"
    {
        echo "$name: $(($(date +%s) - t0)) s wall; $(grep -o 'peak RSS [0-9]* KB' "$out/$name.log" |
            tr '\n' ' '); largest RssAnon $(cat "$out/$name.anon_kb" 2>/dev/null || echo 0) KB"
    } >> "$out/summary.txt"
}

step train mpirun -np "$np" "${mpi_flags[@]}" "${timed[@]}" "$bin" train \
    configs/dlrm_dcnv2_mlperf.yaml --out "$work/run" --overwrite \
    --set runtime.device=cpu --set "data.batch_size=${BATCH:-256}" --set train.log_every=20 \
    --set train.eval_every=0 --set train.eval_samples=16384 \
    --set train.pipeline=prefetch_sparse_dist --set sharding.compute_kernel=key_value \
    --set "sharding.cache.load_factor=${LOAD_FACTOR:-0.01}" \
    --set "sharding.storage.path=$work/storage" \
    --set "train.steps=$steps" --set "train.checkpoint_every=$steps"
du -sb "$work/run/checkpoints"/step-* >> "$out/summary.txt"
step quantize "${timed[@]}" "$bin" ckpt quantize "$work/run/checkpoints" --out "$work/model" \
    --weights int8
du -sb "$work/model" >> "$out/summary.txt"
step eval_model mpirun -np "$np" "${mpi_flags[@]}" "${timed[@]}" "$bin" eval \
    "$work/run/config.yaml" --model "$work/model"
step predict mpirun -np "$np" "${mpi_flags[@]}" "${timed[@]}" "$bin" predict "$work/model" \
    --data synthetic --samples 16384 --out "$work/scores.bin"
grep -h '"kind":"eval_quantized"\|"kind":"predict"' "$out/eval_model.log" "$out/predict.log" \
    >> "$out/summary.txt"
rm -rf "$work"
cat "$out/summary.txt"
