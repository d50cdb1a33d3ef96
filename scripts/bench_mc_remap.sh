#!/usr/bin/env bash
# The managed-collision remap's CPU cost per id as training runs it, next to the lookup of the
# same ids (test/ops/bench_managed_collision.cpp: Zipf 1.05 raw ids over 64 x zch ranks, batch
# 2048 of 10 ids a bag, dim 128, distance_lfu every 100 steps, after the slots are full). For
# each zch_size in ZCH, bucket count in BUCKETS and threshold filter in THRESHOLDS (none admits
# every new id: the heaviest churn), REPEAT runs, alternating.
#   scripts/bench_mc_remap.sh [out_dir]     (BUILD_DIR, ZCH, BUCKETS, THRESHOLDS, REPEAT)
# Writes remap.csv (one row a run, the binary's columns after zch) and provenance.txt. About
# 5 minutes on 2 cores with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/provenance.sh
bin=${BUILD_DIR:-build}/test/bench_managed_collision
out=${1:-bench/results/mc-remap-$(date -u +%Y%m%d)}
zchs=${ZCH:-1000000 4000000}
buckets=${BUCKETS:-1 2 4}
thresholds=${THRESHOLDS:-none probabilistic:0.01}
repeat=${REPEAT:-3}
mkdir -p "$out"
save_provenance "$out"
header=
for r in $(seq "$repeat"); do
    for z in $zchs; do
        for k in $buckets; do
            for t in $thresholds; do
                rows=$("$bin" --zch "$z" --buckets "$k" --threshold "$t")
                [ -n "$header" ] || { header=1; echo "run,$(head -1 <<< "$rows")" > "$out/remap.csv"; }
                echo "$r,$(tail -1 <<< "$rows")" | tee -a "$out/remap.csv"
            done
        done
    done
done
