#!/usr/bin/env bash
# The dense GEMMs on the CPU in each runtime.gemm_math, against their ceilings measured in the same
# run: bench_ops's bench-only MLP and DCN cases (B = 2048: bottom 13-512-256-128, top
# 3456-1024-1024-512-256, the low-rank cross layer N = 3456, r = 512) with their %gemm column
# against cblas_sgemm (f32) or oneDNN's own bf16 matmul on pre-rounded operands (bf16), then the
# MLPerf DLRM-DCNv2 step (tables cut to 1M rows, batch 256, as bench/baselines/compare_cpu.sh)
# with `shardrec bench` in each math. Also the forward cases in scoring's f32 GEMM (predict, serve
# and eval: each element one FMA chain, kernels/cpu/gemm_ordered.cpp) against the same sgemm.
#   scripts/bench_gemm.sh [OUT_DIR]        default bench/results/cpu-<date>-gemm
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
out=${1:-bench/results/cpu-$(date -u +%Y%m%d)-gemm}
maths=${GEMM_MATHS:-f32 bf16}
mkdir -p "$out"
source scripts/provenance.sh
save_provenance "$out"
{
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$build_dir/shardrec" --version
} > "$out/environment.txt"

for math in $maths; do
    for filter in "^Linear" "^CrossNet" "^MixtureCrossNet"; do
        "$build_dir/test/bench_ops" --bench-only --filter "$filter" --gemm-math "$math" \
            --reps "${REPS:-7}" --json "$out/bench_ops_${math}_${filter#^}.json"
    done | tee "$out/bench_ops_$math.txt"
done
for filter in "^LinearForward" "^CrossNetForward" "^MixtureCrossNetForward"; do
    "$build_dir/test/bench_ops" --bench-only --filter "$filter" --row-invariant \
        --reps "${REPS:-7}" --json "$out/bench_ops_scoring_${filter#^}.json"
done | tee "$out/bench_ops_scoring.txt"
cut=()
for t in 0 9 19 20 21; do cut+=(--set "model.tables[$t].num_embeddings=1000000"); done
for math in $maths; do
    "$build_dir/shardrec" bench configs/dlrm_dcnv2_mlperf.yaml --set runtime.device=cpu \
        --set data.batch_size=256 "${cut[@]}" --set runtime.gemm_math="$math" \
        --steps "${STEPS:-20}" --warmup 3 --json "$out/train_dcnv2_$math.json" |
        tee "$out/train_dcnv2_$math.txt"
done
echo "results in $out"
