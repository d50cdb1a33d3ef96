#!/usr/bin/env bash
# CPU benchmarks into one dated folder: the backend-ops kernels against their measured ceilings
# (bench_ops: memcpy bandwidth, sgemm rate) and end-to-end training steps (shardrec bench).
#   scripts/bench.sh [OUT_DIR]        default bench/results/cpu-<date>
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

build_dir=${BUILD_DIR:-build}
out=${1:-bench/results/cpu-$(date +%Y%m%d)}
mkdir -p "$out"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSHARDREC_CUDA="${SHARDREC_CUDA:-AUTO}" >/dev/null
cmake --build "$build_dir" -j "$(nproc 2>/dev/null || echo 2)" --target shardrec bench_ops

source scripts/provenance.sh
save_provenance "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(provenance)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "cores: $(nproc)"
    "$build_dir/shardrec" --version
} > "$out/environment.txt"

"$build_dir/test/bench_ops" --json "$out/bench_ops.json" | tee "$out/bench_ops.txt"
for cfg in configs/quickstart.yaml configs/deepfm.yaml; do
    name=$(basename "$cfg" .yaml)
    "$build_dir/shardrec" bench "$cfg" --steps 50 --json "$out/train_$name.json" | tee "$out/train_$name.txt"
done
echo "results in $out"
