#!/usr/bin/env bash
# The managed-collision training remap against its lookup on the AVX2 VM: test/bench_managed_collision
# (Zipf 1.05 raw ids, batch 2048 of 10 ids a bag, dim 128, 1M slots, distance_lfu every 100
# steps) for 1, 2 and 4 buckets, thresholds none / probabilistic:0.01 / dynamic:10, 3 rounds in
# rotating order; the CSV row of each run, prefixed by the round.
#   bench/results/mc-remap-20261208/run.sh BUILD_DIR OUT_CSV
set -euo pipefail
build=$1 out=$2
header=
for round in 1 2 3; do
    for t in none probabilistic:0.01 dynamic:10; do
        ks=(1 2 4)
        (( round == 2 )) && ks=(2 4 1)
        (( round == 3 )) && ks=(4 1 2)
        for k in "${ks[@]}"; do
            rows=$("$build/test/bench_managed_collision" --zch 1000000 --buckets "$k" --threshold "$t")
            [ -n "$header" ] || { header=1; echo "round,$(head -1 <<< "$rows")" > "$out"; }
            echo "$round,$(tail -1 <<< "$rows")" >> "$out"
        done
    done
done
