#!/usr/bin/env bash
# Alternating runs of two builds: A = BEFORE (OpenBLAS's pthreads build, the Debian default, run
# with OMP_WAIT_POLICY=PASSIVE as the scripts then set it; A0: the same, policy unset) and
# B = AFTER (OpenBLAS's OpenMP build, policy unset). Each round runs A, B, B, A.
#   BEFORE=/work/before/build AFTER=build ab.sh OUT_CSV [ROUNDS]
set -euo pipefail
out=$1 rounds=${2:-4}
cut=()
for t in 0 9 19 20 21; do cut+=(--set "model.tables[$t].num_embeddings=1000000"); done
mpi=(mpirun -np 2 --allow-run-as-root --oversubscribe)
log=$(mktemp)
echo "round,variant,case,value,unit" > "$out"
run() {  # VARIANT CASE UNIT CMD... (the value: the case's own line of the output)
    local v=$1 c=$2 unit=$3 bin val
    shift 3
    case $v in A | A0) bin=$BEFORE ;; B) bin=$AFTER ;; esac
    local cmd=("${@//@BIN@/$bin}")
    case $v in
        A) OMP_WAIT_POLICY=PASSIVE "${cmd[@]}" > "$log" 2>&1 ;;
        *) env -u OMP_WAIT_POLICY "${cmd[@]}" > "$log" 2>&1 ;;
    esac
    case $c in
        qs_np2) val=$(grep -o 'done: .*' "$log" | grep -o '([0-9]* samples/s' | tr -dc '0-9') ;;
        mc*) val=$(tail -1 "$log" | cut -d, -f20) ;;
        *) val=$(grep '^step time' "$log" | awk '{print $4}') ;;
    esac
    echo "$r,$v,$c,$val,$unit" | tee -a "$out"
}
for r in $(seq "$rounds"); do
    for v in A B B A A0; do
        run $v qs_1proc ms @BIN@/shardrec bench configs/quickstart.yaml --steps 300 --warmup 20
        run $v kaggle ms @BIN@/shardrec bench configs/dlrm_criteo_kaggle.yaml --set data.type=synthetic \
            --set data.criteo_binary=null --steps 100 --warmup 10
        [ $v = A0 ] && continue
        rm -rf /tmp/ab_qs
        if [ $v = A ]; then
            run $v qs_np2 samples/s "${mpi[@]}" -x OMP_WAIT_POLICY=PASSIVE @BIN@/shardrec train \
                configs/quickstart.yaml --out /tmp/ab_qs
        else
            run $v qs_np2 samples/s "${mpi[@]}" @BIN@/shardrec train configs/quickstart.yaml --out /tmp/ab_qs
        fi
        for math in f32 bf16; do
            run $v dcnv2_$math ms @BIN@/shardrec bench configs/dlrm_dcnv2_mlperf.yaml \
                --set runtime.device=cpu --set data.batch_size=256 "${cut[@]}" \
                --set runtime.gemm_math=$math --steps 20 --warmup 3
        done
        for k in 1 4; do
            run $v mc_buckets$k step_ratio @BIN@/test/bench_managed_collision --zch 1000000 \
                --buckets $k --threshold none
        done
    done
done
rm -rf /tmp/ab_qs "$log"
