#!/usr/bin/env bash
# Benchmark sweep over world sizes, batch sizes and sharding types: one `shardrec bench` per
# point under mpirun, one CSV row each, and a plot of samples/s and step time (gnuplot).
#   scripts/sweep.sh [CONFIG] [OUT_DIR]   (default configs/quickstart.yaml, bench/results/sweep-<date>)
# Environment: NPS ("1 2 4"), BATCHES ("128 256 512"), TYPES ("table_wise row_wise column_wise
# table_row_wise data_parallel"), STEPS (30).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
command -v gnuplot >/dev/null || { apt-get install -y -qq gnuplot-nox >/dev/null 2>&1 || true; }

config=${1:-configs/quickstart.yaml}
out=${2:-bench/results/sweep-$(date +%Y%m%d)}
build_dir=${BUILD_DIR:-build}
source scripts/provenance.sh
prepare_bench "$out" "$build_dir"
csv="$out/sweep.csv"
echo "world_size,batch_per_rank,sharding_type,step_ms,samples_per_s,peak_bytes,allocs_per_step,commit,date" > "$csv"
for np in ${NPS:-1 2 4}; do
    for batch in ${BATCHES:-128 256 512}; do
        for type in ${TYPES:-table_wise row_wise column_wise table_row_wise data_parallel}; do
            json="$out/np${np}_b${batch}_${type}.json"
            mpirun -np "$np" "${mpi_flags[@]}" "$build_dir/shardrec" bench "$config" \
                --steps "${STEPS:-30}" --json "$json" --set "data.batch_size=$batch" \
                --set "sharding.sharding_type=$type" --set "sharding.tables=[]" >/dev/null
            python3 - "$json" "$np" "$batch" "$type" >> "$csv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]},{sys.argv[3]},{sys.argv[4]},{r['step_ms']},{r['samples_per_s']},"
      f"{r['peak_bytes']},{r['allocs_per_step']},{r['commit']},{r['date']}")
PY
        done
    done
done
echo "wrote $csv"

if command -v gnuplot >/dev/null; then
    gnuplot <<GP
set terminal pngcairo size 1100,500
set output "$out/sweep.png"
set datafile separator ","
set multiplot layout 1,2 title "shardrec bench sweep: $(basename "$config")"
set xlabel "world size x batch per rank (points in CSV order)"
set ylabel "samples/s"
plot "$csv" using 0:5 every ::1 with linespoints title "samples/s"
set ylabel "step time (ms)"
plot "$csv" using 0:4 every ::1 with linespoints title "step ms"
unset multiplot
GP
    echo "wrote $out/sweep.png"
fi
