#!/usr/bin/env bash
# Row-sharded predict, rows fetched (NEW binary) against partial sums reduce-scattered (OLD, the
# commit before): alternating rounds on one int8 quickstart model, 2 ranks, 262144 samples.
#   pairs.sh OLD_BIN NEW_BIN MODEL ROUNDS > pairs.csv
set -euo pipefail
old=$1 new=$2 model=$3 rounds=${4:-4}
echo "round,binary,plan,samples_per_s"
for r in $(seq "$rounds"); do
    for plan in sharded_plan row_wise; do
        extra=()
        [ "$plan" = row_wise ] && extra=(--set sharding.sharding_type=row_wise --set 'sharding.tables=[]')
        for b in old new; do
            bin=$old; [ $b = new ] && bin=$new
            rate=$(mpirun -np 2 --allow-run-as-root --oversubscribe "$bin" predict "$model" \
                --data synthetic --samples 262144 --out /tmp/pairs_scores.bin "${extra[@]}" 2>&1 |
                grep -o '"samples_per_s":[0-9.]*' | cut -d: -f2)
            echo "$r,$b,$plan,$rate"
        done
    done
done
