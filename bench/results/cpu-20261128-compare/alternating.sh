#!/usr/bin/env bash
# Rounds of the DLRM-DCNv2 commands of bench/baselines/compare_cpu.sh run one after another
# (shardrec and TorchRec, f32 and bf16), the order within a round alternating.
#   PYTHON=... alternating.sh OUT_DIR [ROUNDS]
set -euo pipefail
out=$1 rounds=${2:-4}
bin=${BUILD_DIR:-build}/shardrec
py=${PYTHON:-python3}
mkdir -p "$out"
cut=()
for t in 0 9 19 20 21; do cut+=(--set "model.tables[$t].num_embeddings=1000000"); done
cfg=(configs/dlrm_dcnv2_mlperf.yaml --set runtime.device=cpu --set data.batch_size=256 "${cut[@]}")
run() {  # ROUND IMPL
    local log="$out/r$1-$2.txt" timing=(--steps 20 --warmup 3)
    local baseline=("$py" bench/baselines/torch_dlrm.py "${cfg[@]}" --shardrec "$bin" --device cpu)
    case $2 in
        shardrec) "$bin" bench "${cfg[@]}" "${timing[@]}" ;;
        shardrec_bf16) "$bin" bench "${cfg[@]}" --set runtime.gemm_math=bf16 "${timing[@]}" ;;
        torchrec) "${baseline[@]}" --impl torchrec "${timing[@]}" ;;
        torchrec_bf16) "${baseline[@]}" --impl torchrec --math bf16 "${timing[@]}" ;;
    esac > "$log" 2>&1
    echo "r$1 $2 $(grep -h '^step time' "$log")"
}
for r in $(seq "$rounds"); do
    if (( r % 2 == 1 )); then impls=(shardrec torchrec shardrec_bf16 torchrec_bf16)
    else impls=(torchrec_bf16 shardrec_bf16 torchrec shardrec); fi
    for impl in "${impls[@]}"; do run "$r" "$impl"; done
done
