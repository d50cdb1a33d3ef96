#!/usr/bin/env bash
# Back-to-back pairs on this AVX2 machine (no AVX-512), alternating, the machine otherwise idle.
#   bench_ops_old  754b0e9: scalar embedding init, scalar (SSE2) lookup
#   bench_ops_new  92b8404: + the AVX2 embedding init
#   bench_ops_avx2 46dfd30: + the AVX2 + F16C lookup
#   bmc_old / bmc_new: bench_managed_collision at 754b0e9 / 92b8404 (evicted rows are re-initialised)
set -euo pipefail
out=$1
echo "round,binary,case,med_us,p10_us,p90_us,gbps,pct_rr" > $out/ops.csv
for r in 1 2 3 4; do
  for b in old new; do
    OMP_WAIT_POLICY=PASSIVE /tmp/bench_ops_$b --filter EmbeddingInit --reps 9 2>&1 | grep -E "R=262144" | awk -v r=$r -v b=$b '{print r","b",\""$2"\","$3","$4","$5","$6","$9}' >> $out/ops.csv
  done
  for b in new avx2; do
    OMP_WAIT_POLICY=PASSIVE /tmp/bench_ops_$b --filter EmbeddingBagForward --bench-only --reps 5 2>&1 | grep -E "E=4194304" | awk -v r=$r -v b=$b '{print r","b",\""$2"\","$3","$4","$5","$6","$9}' >> $out/ops.csv
  done
done
hdr=0
for r in 1 2 3; do
  for b in old new; do
    rows=$(OMP_WAIT_POLICY=PASSIVE /tmp/bmc_$b --zch 1000000 --buckets 1 --threshold none)
    [ $hdr = 1 ] || { hdr=1; echo "round,binary,$(head -1 <<< "$rows")" > $out/mc_remap.csv; }
    echo "$r,$b,$(tail -1 <<< "$rows")" >> $out/mc_remap.csv
  done
done
