#!/usr/bin/env bash
# shardrec against the baselines on this machine's CPU: `shardrec bench`, plain PyTorch and
# TorchRec (bench/baselines/torch_dlrm.py --impl torch | torchrec) on the same configs, one
# process each, back to back, results in OUT (default bench/results/cpu-DATE/compare_*).
#   PYTHON   a python with torch, torchrec and fbgemm_gpu (fbgemm-gpu-cpu), e.g. a venv with
#            `pip install torch==2.5.1 fbgemm-gpu-cpu==1.0.0 torchrec==1.0.0`; default python3
#   BUILD_DIR  the shardrec build (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
bin=${BUILD_DIR:-build}/shardrec
out=${OUT:-bench/results/cpu-$(date -u +%Y%m%d)}
mkdir -p "$out"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

compare() {  # compare NAME STEPS WARMUP CONFIG [--set K=V ...]
    local name=$1 steps=$2 warmup=$3
    shift 3
    local log="$out/compare_${name}_shardrec.txt"
    "$bin" bench "$@" --steps "$steps" --warmup "$warmup" \
        --json "$out/compare_${name}_shardrec.json" > "$log" 2>&1 || { cat "$log"; exit 1; }
    for impl in torch torchrec; do
        log="$out/compare_${name}_${impl}.txt"
        "$py" bench/baselines/torch_dlrm.py "$@" --shardrec "$bin" --impl "$impl" --device cpu \
            --steps "$steps" --warmup "$warmup" --json "$out/compare_${name}_${impl}.json" \
            > "$log" 2>&1 || { cat "$log"; exit 1; }
    done
    for impl in shardrec torch torchrec; do
        printf '%-12s %-9s %s\n' "$name" "$impl" "$(grep -h '^step time' "$out/compare_${name}_${impl}.txt")"
    done
}

compare quickstart 300 20 configs/quickstart.yaml
# The Kaggle DLRM on synthetic batches of the same shapes (its data section names Criteo files).
compare kaggle 300 20 configs/dlrm_criteo_kaggle.yaml --set data.type=synthetic \
    --set data.criteo_binary=null
cut=()
for t in 0 9 19 20 21; do cut+=(--set "model.tables[$t].num_embeddings=1000000"); done
compare dcnv2 20 3 configs/dlrm_dcnv2_mlperf.yaml --set runtime.device=cpu \
    --set data.batch_size=256 "${cut[@]}"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (+ uncommitted changes)')"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$py" -c 'import torch, torchrec, fbgemm_gpu; print("torch", torch.__version__, "| torchrec", getattr(torchrec, "__version__", "?"), "| fbgemm_gpu", getattr(fbgemm_gpu, "__version__", "?"), "| threads", torch.get_num_threads())' 2>/dev/null
    "$bin" --version
} > "$out/compare_environment.txt"
