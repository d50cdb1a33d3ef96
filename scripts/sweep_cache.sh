#!/usr/bin/env bash
# key_value tables: hit rate and step time against the cache size, LRU and LFU, the sparse_dist
# and prefetch_sparse_dist pipelines, and the same model with its rows in memory (fused). One
# `shardrec bench` per point under mpirun, one CSV row each, and a plot (gnuplot).
#   scripts/sweep_cache.sh [CONFIG] [OUT_DIR]
#       (default configs/dlrm_key_value.yaml, bench/results/cache-sweep-<date>)
# Environment: NP (2), LOAD_FACTORS ("0.01 0.02 0.05 0.1 0.2 0.5"), STEPS (30), WARMUP (10),
# STORAGE (a directory for the rows; default OUT_DIR/storage, removed after each point), SETS
# (more `K=V` settings for every point, space-separated: e.g. data.criteo_binary.path=DIR),
# MPIRUN_FLAGS (more mpirun flags, e.g. "--bind-to none": a rank bound to one core, mpirun's
# default, leaves the prefetch pipeline's fill thread no CPU of its own).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
command -v gnuplot >/dev/null || { apt-get install -y -qq gnuplot-nox >/dev/null 2>&1 || true; }

config=${1:-configs/dlrm_key_value.yaml}
out=${2:-bench/results/cache-sweep-$(date +%Y%m%d)}
build_dir=${BUILD_DIR:-build}
storage=${STORAGE:-$out/storage}
source scripts/provenance.sh
prepare_bench "$out" "$build_dir"
# shellcheck disable=SC2206  # MPIRUN_FLAGS is a list of flags
mpi_flags+=(${MPIRUN_FLAGS:-})
np=${NP:-2}
csv="$out/sweep.csv"
echo "kernel,load_factor,algorithm,pipeline,step_ms,samples_per_s,hit_rate,misses_per_step,"\
"mb_in_per_step,mb_out_per_step,disk_bytes,compute_ms,prefetch_ahead_ms,prefetch_ms,"\
"host_peak_bytes,commit,date" > "$csv"

point() {  # kernel load_factor algorithm pipeline
    local name="$1_$2_$3_$4" sets=(--set "train.pipeline=$4") kv
    for kv in ${SETS:-}; do sets+=(--set "$kv"); done
    [ "$1" = fused ] && sets+=(--set sharding.compute_kernel=fused) ||
        sets+=(--set "sharding.cache.load_factor=$2" --set "sharding.cache.algorithm=$3"
               --set "sharding.storage.path=$storage")
    mpirun -np "$np" "${mpi_flags[@]}" "$build_dir/shardrec" bench "$config" \
        --steps "${STEPS:-30}" --warmup "${WARMUP:-10}" --json "$out/$name.json" "${sets[@]}" \
        > "$out/$name.txt" 2>&1
    rm -rf "$storage"
    python3 - "$out/$name.json" "$@" >> "$csv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
k, lf, alg, pipe = sys.argv[2:6]
print(f"{k},{lf},{alg},{pipe},{r['step_ms']},{r['samples_per_s']},{r['cache_hit_rate']},"
      f"{r['cache_misses_per_step']},{r['cache_bytes_in_per_step'] / 1e6:.3f},"
      f"{r['cache_bytes_out_per_step'] / 1e6:.3f},{r['storage_disk_bytes']},{r['compute_ms']},"
      f"{r['prefetch_ahead_ms']},{r['prefetch_ms']},{r['host_peak_bytes']},{r['commit']},"
      f"{r['date']}")
PY
    tail -n 1 "$csv"
}

point fused 1 - sparse_dist
for lf in ${LOAD_FACTORS:-0.01 0.02 0.05 0.1 0.2 0.5}; do
    point key_value "$lf" lru sparse_dist
    point key_value "$lf" lru prefetch_sparse_dist
    point key_value "$lf" lfu sparse_dist
done

if command -v gnuplot >/dev/null; then
    gnuplot <<EOF
set terminal pngcairo size 1100,420
set output "$out/sweep.png"
set datafile separator ","
set multiplot layout 1,2
set logscale x
set xlabel "load_factor (cache slots / rows)"
set key bottom right
set ylabel "hit rate (distinct rows of a batch)"
plot "< grep key_value,.*,lru,sparse_dist, $csv" using 2:7 with linespoints title "lru", \
     "< grep key_value,.*,lfu,sparse_dist, $csv" using 2:7 with linespoints title "lfu"
set ylabel "step time (ms)"
set key top right
plot "< grep key_value,.*,lru,sparse_dist, $csv" using 2:5 with linespoints title "key_value, sparse_dist", \
     "< grep key_value,.*,lru,prefetch_sparse_dist, $csv" using 2:5 with linespoints title "key_value, prefetch", \
     "< grep ^fused $csv" using (0.01):5:(0.49):(0) with vectors nohead title "fused (rows in memory)"
unset multiplot
EOF
fi
echo "wrote $csv"
