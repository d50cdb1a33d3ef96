#!/usr/bin/env bash
# shardrec against the baselines on this machine's CPU: `shardrec bench`, plain PyTorch and
# TorchRec (bench/baselines/torch_dlrm.py --impl torch | torchrec) on the same configs, one
# process each, back to back, results in OUT (default bench/results/cpu-DATE/compare_*).
# Two bf16 runs beside them: torchrec_bf16 (TorchRec under torch.autocast(cpu, bfloat16) around
# the forward and the loss: the dense GEMMs in bf16 through oneDNN, the tables as TorchRec has
# them) and shardrec_bf16 (--set runtime.gemm_math=bf16: oneDNN's bf16 matmul, f32 weights).
#   PYTHON   a python with torch, torchrec and fbgemm_gpu (fbgemm-gpu-cpu), e.g. the venv of
#            bench/baselines/setup_venv.sh (torch==2.5.1, fbgemm-gpu-cpu==1.0.0,
#            torchrec==1.0.0); default python3
#   BUILD_DIR  the shardrec build (default build)
#   CONFIGS  which of quickstart, kaggle, dcnv2 to run (default all three)
#   SHARDREC_BF16=0  no shardrec_bf16 run
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
bin=${BUILD_DIR:-build}/shardrec
out=${OUT:-bench/results/cpu-$(date -u +%Y%m%d)}
mkdir -p "$out"
source scripts/provenance.sh
save_provenance "$out"
configs=" ${CONFIGS:-quickstart kaggle dcnv2} "
shardrec_bf16=${SHARDREC_BF16:-1}

run() {  # run NAME IMPL CONFIG [--set K=V ...] (with steps and warmup from compare)
    local name=$1 impl=$2
    shift 2
    local log="$out/compare_${name}_${impl}.txt" json="$out/compare_${name}_${impl}.json"
    local timing=(--steps "$steps" --warmup "$warmup" --json "$json")
    local baseline=("$py" bench/baselines/torch_dlrm.py "$@" --shardrec "$bin" --device cpu)
    case $impl in
    shardrec) "$bin" bench "$@" "${timing[@]}" ;;
    shardrec_bf16) "$bin" bench "$@" --set runtime.gemm_math=bf16 "${timing[@]}" ;;
    torch | torchrec) "${baseline[@]}" --impl "$impl" "${timing[@]}" ;;
    torchrec_bf16) "${baseline[@]}" --impl torchrec --math bf16 "${timing[@]}" ;;
    esac > "$log" 2>&1 || { cat "$log"; exit 1; }
}

compare() {  # compare NAME STEPS WARMUP CONFIG [--set K=V ...]
    local name=$1 steps=$2 warmup=$3 impl why
    shift 3
    [[ $configs == *" $name "* ]] || return 0
    local impls=(shardrec torch torchrec torchrec_bf16)
    if [[ $shardrec_bf16 == 0 ]]; then
        :
    elif why=$("$bin" validate "$@" --set runtime.gemm_math=bf16 2>&1); then
        impls+=(shardrec_bf16)
    else
        echo "note: shardrec_bf16 skipped for $name: $bin validate refuses" \
            "runtime.gemm_math=bf16: $(tail -n 1 <<< "$why")"
    fi
    for impl in "${impls[@]}"; do
        run "$name" "$impl" "$@"
    done
    for impl in "${impls[@]}"; do
        printf '%-12s %-14s %s\n' "$name" "$impl" "$(grep -h '^step time' "$out/compare_${name}_${impl}.txt")"
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
