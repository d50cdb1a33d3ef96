#!/usr/bin/env bash
# The quickstart's accuracy numbers of the README, measured: (1) a model trained 300 steps on 2
# ranks, quantized fp16 / int8 / fp8 / int4 (t0 int8, t2 fp8), each evaluated with `eval --model`
# beside its f32 checkpoint on 16384 eval samples; (2) 150 steps on 2 ranks with every table
# key_value (load_factor 0.1, lru) and the cache in f16 / bf16, against the fused f32 run, as
# test_e2e "key_value e2e: a reduced-precision cache*" trains them (its batch 32, 4096 eval samples).
#   bench/results/accuracy-20261208/run.sh OUT_DIR    (from the repository root, built)
set -euo pipefail
out=$1
bin=build/shardrec
mpi="mpirun -np 2 --allow-run-as-root --oversubscribe"
mkdir -p "$out"
$mpi $bin train configs/quickstart.yaml --out "$out/qs300" --set train.steps=300 \
    --set train.checkpoint_every=300 --set train.eval_every=0 --set train.eval_samples=16384 \
    > "$out/qs300.log" 2>&1
for w in fp16 int8 fp8 int4; do
    extra=()
    [ "$w" = int4 ] && extra=(--tables t0=int8,t2=fp8)
    $bin ckpt quantize "$out/qs300/checkpoints" --out "$out/model_$w" --weights "$w" "${extra[@]}" \
        > "$out/quantize_$w.log" 2>&1
    $bin eval "$out/qs300/config.yaml" --model "$out/model_$w" > "$out/eval_$w.log" 2>&1
    grep '"kind":"eval_quantized"' "$out/eval_$w.log" | sed "s/^/$w /"
done
common=(--set train.steps=150 --set train.log_every=50 --set train.eval_every=0
        --set train.eval_samples=4096 --set data.batch_size=32 --set train.pipeline=base)
$mpi $bin train configs/quickstart.yaml --out "$out/fused" "${common[@]}" > "$out/fused.log" 2>&1
grep '"kind":"eval"' "$out/fused/metrics.jsonl" | sed 's/^/fused f32 /'
for p in f16 bf16; do
    $mpi $bin train configs/quickstart.yaml --out "$out/kv_$p" "${common[@]}" \
        --set sharding.compute_kernel=key_value --set sharding.storage.path="$out/store" \
        --set sharding.cache.load_factor=0.1 --set sharding.cache.algorithm=lru \
        --set sharding.cache.precision=$p > "$out/kv_$p.log" 2>&1
    grep '"kind":"eval"' "$out/kv_$p/metrics.jsonl" | sed "s/^/key_value $p /"
done
