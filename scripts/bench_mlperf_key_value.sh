#!/usr/bin/env bash
# The MLPerf DLRM-DCNv2 model at its real table sizes (204 M rows of dim 128: 104 GB of rows and
# Adagrad state) trained on this machine's CPU with key_value tables: rows and state on local
# disk, a DRAM cache of LOAD_FACTOR of them. Trains STEPS steps, evaluates, checkpoints, resumes
# for 20 more; then the same model with its 40 M-row tables cut to 1 M rows, in memory (fused),
# for the step time without the disk tier. Records per rank peak RSS (/usr/bin/time), the
# largest disk use of the rows (sampled), the cache statistics (metrics.jsonl) and the logs.
#   scripts/bench_mlperf_key_value.sh [OUT_DIR]   (default bench/results/mlperf-key-value-<date>)
# Environment: NP (2), BATCH (per rank, 256), STEPS (200), LOAD_FACTOR (0.01), STORAGE (a local
# directory for the rows; default OUT_DIR/storage), PIPELINE (prefetch_sparse_dist).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-bench/results/mlperf-key-value-$(date +%Y%m%d)}
build_dir=${BUILD_DIR:-build}
storage=${STORAGE:-$out/storage}
np=${NP:-2}
steps=${STEPS:-200}
source scripts/provenance.sh
prepare_bench "$out" "$build_dir"
bin="$build_dir/shardrec"
config=configs/dlrm_dcnv2_mlperf.yaml
common=(--set runtime.device=cpu --set "data.batch_size=${BATCH:-256}" --set train.log_every=20
        --set train.eval_every=0 --set train.eval_samples=16384
        --set "train.pipeline=${PIPELINE:-prefetch_sparse_dist}")
key_value=(--set sharding.compute_kernel=key_value
           --set "sharding.cache.load_factor=${LOAD_FACTOR:-0.01}"
           --set "sharding.storage.path=$storage")

# The largest disk use of the row files while a run lasts (they go with it).
sample_disk() {
    local max=0 now
    while [ -e "$out/.sampling" ]; do
        now=$(du -sb "$storage" 2>/dev/null | cut -f1 || echo 0)
        [ "${now:-0}" -gt "$max" ] && max=$now && echo "$max" > "$out/$1.disk_bytes"
        sleep 5
    done
}

run() {  # name, args...
    local name=$1
    shift
    touch "$out/.sampling"
    sample_disk "$name" &
    local sampler=$!
    local t0
    t0=$(date +%s)
    mpirun -np "$np" "${mpi_flags[@]}" /usr/bin/time -f "peak RSS %M KB (rank's process)" \
        "$bin" train "$config" "$@" > "$out/$name.log" 2>&1 || {
        rm -f "$out/.sampling"
        wait "$sampler"
        echo "$name failed: see $out/$name.log" >&2
        exit 1
    }
    echo "$name: $(($(date +%s) - t0)) s wall" >> "$out/summary.txt"
    rm -f "$out/.sampling"
    wait "$sampler"
}

rm -rf "$out/kv" "$out/kv_resumed" "$out/cut_fused" "$out/summary.txt"
run kv --out "$out/kv" --overwrite "${common[@]}" "${key_value[@]}" \
    --set "train.steps=$steps" --set "train.checkpoint_every=$steps"
run kv_resumed --out "$out/kv_resumed" --overwrite "${common[@]}" "${key_value[@]}" \
    --set "train.steps=$((steps + 20))" --resume "$out/kv/checkpoints"
cut=()
for t in 0 9 19 20 21; do cut+=(--set "model.tables[$t].num_embeddings=1000000"); done
run cut_fused --out "$out/cut_fused" --overwrite "${common[@]}" "${cut[@]}" \
    --set "train.steps=$steps"
du -sb "$out/kv/checkpoints"/step-* > "$out/checkpoint_bytes.txt"
rm -rf "$storage" "$out/kv/checkpoints" "$out/kv_resumed/checkpoints"

python3 - "$out" "$steps" >> "$out/summary.txt" <<'PY'
import json, os, re, sys
out, steps = sys.argv[1], int(sys.argv[2])
for name in ("kv", "kv_resumed", "cut_fused"):
    log = open(os.path.join(out, name + ".log")).read()
    rss = [int(x) for x in re.findall(r"peak RSS (\d+) KB", log)]
    recs = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl"))]
    train = [r for r in recs if r["kind"] == "train"]
    sps = [r["samples_per_s"] for r in train[1:]] or [0]
    ev = [r for r in recs if r["kind"] == "eval"]
    cache = [r for r in recs if r["kind"] == "cache"]
    last = {}
    for r in cache:
        last[r["table"]] = r
    uniq = sum(r["unique_rows"] for r in last.values())
    miss = sum(r["misses"] for r in last.values())
    disk = open(os.path.join(out, name + ".disk_bytes")).read().strip() \
        if os.path.exists(os.path.join(out, name + ".disk_bytes")) else "0"
    print(f"{name}: peak RSS per rank {[round(r / 1e6, 2) for r in rss]} GB; "
          f"median samples/s {sorted(sps)[len(sps) // 2]:.0f}; "
          f"eval {ev[-1]['auc'] if ev else '-'} AUC; "
          f"last window hit rate {1 - miss / uniq if uniq else 1:.4f}; "
          f"largest disk use {int(disk) / 1e9:.2f} GB")
print(open(os.path.join(out, "checkpoint_bytes.txt")).read().strip())
PY
cat "$out/summary.txt"
