#!/usr/bin/env bash
# Back-to-back pairs of the two builds of ab.sh (A: BEFORE with OMP_WAIT_POLICY=PASSIVE,
# B: AFTER with the policy unset), the pair's order swapped each time, so each pair falls in the
# same spell of a noisy VM; read as the ratio B / A of each pair.
#   BEFORE=/work/before/build AFTER=build pairs.sh OUT_CSV [PAIRS] [MC_PAIRS]
set -euo pipefail
out=$1 pairs=${2:-20} mc_pairs=${3:-8}
log=$(mktemp)
echo "pair,variant,case,value,unit" > "$out"
one() {  # VARIANT CASE CMD...
    local v=$1 c=$2 bin val
    shift 2
    case $v in A) bin=$BEFORE ;; B) bin=$AFTER ;; esac
    local cmd=("${@//@BIN@/$bin}")
    if [ $v = A ]; then OMP_WAIT_POLICY=PASSIVE "${cmd[@]}" > "$log" 2>&1
    else env -u OMP_WAIT_POLICY "${cmd[@]}" > "$log" 2>&1; fi
    case $c in
        mc*) val=$(tail -1 "$log" | cut -d, -f20) ;;
        *) val=$(grep '^step time' "$log" | awk '{print $4}') ;;
    esac
    echo "$p,$v,$c,$val,$([[ $c == mc* ]] && echo step_ratio || echo ms)" >> "$out"
}
pair() {  # CASE CMD...: A then B on even pairs, B then A on odd ones
    if (( p % 2 == 0 )); then one A "$@"; one B "$@"; else one B "$@"; one A "$@"; fi
}
for p in $(seq "$pairs"); do
    pair qs_1proc @BIN@/shardrec bench configs/quickstart.yaml --steps 300 --warmup 20
    pair kaggle @BIN@/shardrec bench configs/dlrm_criteo_kaggle.yaml --set data.type=synthetic \
        --set data.criteo_binary=null --steps 100 --warmup 10
    if (( p <= mc_pairs )); then
        pair mc_buckets1 @BIN@/test/bench_managed_collision --zch 1000000 --buckets 1 --threshold none
        pair mc_buckets4 @BIN@/test/bench_managed_collision --zch 1000000 --buckets 4 --threshold none
    fi
done
rm -f "$log"
