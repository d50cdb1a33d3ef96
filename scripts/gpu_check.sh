#!/usr/bin/env bash
# The GPU check, one command on a GPU machine: builds shardrec for sm_90, runs the cuda tests (every
# op against the float64 reference on random inputs of several sizes, outputs NaN-poisoned and
# guarded, plus bitwise determinism; NCCL; GPU training against the CPU), compute-sanitizer
# memcheck and racecheck over the kernel tests, a training step at the MLPerf DLRM-DCNv2 shapes
# with each gemm_math, the same step in plain PyTorch (bench/baselines/, where torch is there),
# where the step's time goes (`shardrec bench --profile`, and per kernel under Nsight Systems where
# the machine has it), and the benchmarks
# (embedding forward/backward against the measured device copy bandwidth, GEMM-shaped ops
# against cuBLAS on the DLRM/DCN shapes), and writes everything to one folder:
# $OUT when set (the device tool), else bench/results/gpu-DATE/.
#
# On a GPU node with shardrec's packages installed (scripts/setup.sh):
#   scripts/gpu_check.sh
# Through the device tool (its image has CUDA, cuBLAS, NCCL, CMake, ninja, Python, and at most
# Catch2 v3 and its own spdlog and MPI): once, here, `scripts/gpu_deps.sh`, then the call
#   run(command="bash scripts/gpu_check.sh", carry=["third_party/gpu-deps"], timeout_s=600)
# The carried .debs are unpacked into /tmp (Open MPI relocated there through OPAL_PREFIX) and the
# whole project is built, so the cuda label also runs the NCCL and GPU-training tests; without a
# carried MPI the build is kernels-only (SHARDREC_KERNELS_ONLY: core, kernels, their tests and
# bench_ops). The output is at most 8 files (all the tool brings back).
#
# Steps run in the order build, test, memcheck, train, profile, bench, racecheck, kernels,
# baseline, tiers (memcheck and racecheck share sanitizer.log; baseline and tiers append to
# train_bench.txt), within BUDGET_S seconds in all (default 560, inside the tool's 600 s per command):
# each step's time limit is cut to what is left, and a step with no time left is reported as
# skipped. The step `kernels` runs one repetition of each of the MLPerf step's main ops
# (bench_ops --once: embedding forward and fused backward at the config's pooling, the cross
# layer and the largest linear layer) under Nsight Compute (ncu, where installed) and lists each
# kernel's duration, after the step's profile in profile.txt; KERNEL_CASES (';'-separated
# bench_ops filters) and KERNEL_GEMM_MATH (default bf16) choose them.
# The step `tiers` times the MLPerf step (bf16) with the cut tables in HBM (fused) against
# fused_uvm_caching (rows in host memory, a cache of load_factor 0.2 in HBM) on both pipelines,
# and at the full table sizes (204 M rows in host memory); the hit rate and the bytes each way.
# Environment: STEPS (default "build test memcheck train profile bench racecheck kernels
# baseline tiers"; "configure" alone only configures, a dry run of the dependency handling on any
# machine; a later call on a warm machine can run the rest), BUILD_DIR (default build-gpu),
# CUDA_ARCHS (default 90), USE_CARRIED_DEPS=1 (unpack third_party/gpu-deps even where the system
# has the packages), KERNELS_ONLY=ON|OFF (default: ON where there is no MPI), GEMM_MATHS (default
# "f32 tf32 bf16": the train and baseline steps' runtime.gemm_math values), e.g.
#   STEPS="build kernels" KERNEL_CASES="^SwishLayerNormBackward" bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."

out=${OUT:-bench/results/gpu-$(date -u +%Y%m%d)}
mkdir -p "$out"
steps=${STEPS:-build test memcheck train profile bench racecheck kernels baseline tiers}
build_dir=${BUILD_DIR:-build-gpu}
summary="$out/summary.txt"
deps_dir=third_party/gpu-deps
jobs=$(nproc 2>/dev/null || echo 4)

note() { echo "$*" | tee -a "$summary"; }
has_step() { [[ " $steps " == *" $1 "* ]]; }
# Keeps a log under the tool's 16 MiB per file.
cap() { head -c 15000000; }

: > "$summary"
note "# shardrec GPU check"
note "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
source scripts/provenance.sh
save_provenance "$out"
note "commit: $(provenance)$(test -f "$out/uncommitted.diff" && echo ' (the changes: uncommitted.diff)')"
note "host: $(hostname), $(nproc) cores, $(uname -r)"
note "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(ldd --version 2>&1 | head -1)"
note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
note "nvcc: $(nvcc --version 2>&1 | tail -1)"
note "cmake: $(cmake --version 2>&1 | head -1); c++: $(c++ --version 2>&1 | head -1)"
note "steps: $steps"

# ---- dependencies: the system's, or the carried Debian packages ----
cmake_args=()
# The carried set is used whole where the system lacks any part of it (Catch2 v2's single header
# is the part GPU images lack most: they ship Catch2 v3 if any).
if [ -d "$deps_dir" ] && { [ "${USE_CARRIED_DEPS:-0}" = 1 ] || ! [ -f /usr/include/catch2/catch.hpp ] ||
    ! [ -f /usr/include/spdlog/spdlog.h ]; }; then
    prefix=/tmp/shardrec-gpu-deps
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for deb in "$deps_dir"/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$deb" "$prefix"
        else  # a .deb is an ar archive holding data.tar.{xz,zst,gz}
            member=$(ar t "$deb" | grep '^data\.tar')
            case "$member" in
                *.xz) ar p "$deb" "$member" | tar -xJ -C "$prefix" ;;
                *.zst) ar p "$deb" "$member" | tar --zstd -x -C "$prefix" ;;
                *) ar p "$deb" "$member" | tar -xz -C "$prefix" ;;
            esac
        fi
    done
    lib="$prefix/usr/lib/x86_64-linux-gnu"
    export LD_LIBRARY_PATH="$lib:$lib/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if [ -x "$prefix/usr/bin/mpicxx.openmpi" ]; then
        # Relocated Open MPI (its wrappers and orted read OPAL_PREFIX); one node: shared memory
        # and TCP only, the fabric components whose libraries the image lacks stay unloaded.
        export OPAL_PREFIX="$prefix/usr" PATH="$prefix/usr/bin:$PATH"
        export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_mtl=^ofi,psm,psm2
        export OMPI_MCA_osc=^ucx OMPI_MCA_btl_base_warn_component_unused=0
        cmake_args+=(-DMPI_C_COMPILER="$prefix/usr/bin/mpicc.openmpi"
                     -DMPI_CXX_COMPILER="$prefix/usr/bin/mpicxx.openmpi"
                     -DMPIEXEC_EXECUTABLE="$prefix/usr/bin/mpirun.openmpi"
                     -Dyaml-cpp_DIR="$lib/cmake/yaml-cpp")
    fi
    cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr"
                 -Dspdlog_DIR="$lib/cmake/spdlog" -Dfmt_DIR="$lib/cmake/fmt"
                 -DCatch2_DIR="$prefix/usr/lib/cmake/Catch2"
                 -DCMAKE_LIBRARY_PATH="$lib/openblas-openmp"
                 -DCBLAS_INCLUDE_DIR="$prefix/usr/include/x86_64-linux-gnu/openblas-openmp")
    note "deps: unpacked $(ls "$deps_dir"/*.deb | wc -l) carried .debs into $prefix"
fi
kernels_only=${KERNELS_ONLY:-OFF}
if [ -z "${KERNELS_ONLY:-}" ] && ! command -v mpicc >/dev/null && ! command -v mpicc.openmpi >/dev/null; then
    kernels_only=ON
fi
note "kernels-only build (no MPI here): $kernels_only"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

failed=()
deadline=$((SECONDS + ${BUDGET_S:-560}))
# run_step NAME LOG TIMEOUT_S command...: TIMEOUT_S 0 is the budget left. timeout(1) cannot run a
# shell function, so a step that is one bounds its own commands with `limited`.
step_deadline=0
limited() {
    local t=$((step_deadline - SECONDS))
    [ "$t" -ge 1 ] || return 124
    timeout "$t" "$@"
}
run_step() {
    local name=$1 log=$2 limit=$3
    shift 3
    local t0=$SECONDS rc left=$((deadline - SECONDS))
    if [ "$left" -lt 20 ]; then
        failed+=("$name")
        note "step $name: SKIPPED (out of time budget)"
        return 1
    fi
    if [ "$limit" -eq 0 ] || [ "$limit" -gt "$left" ]; then
        limit=$left
    fi
    step_deadline=$((SECONDS + limit))
    if declare -F "$1" >/dev/null; then
        "$@" 2>&1 | cap > "$out/$log"
    else
        timeout "$limit" "$@" 2>&1 | cap > "$out/$log"
    fi
    rc=${PIPESTATUS[0]}
    local verdict="ok"
    if [ "$rc" -eq 124 ]; then
        verdict="TIMED OUT after ${limit}s"
    elif [ "$rc" -ne 0 ]; then
        verdict="FAILED (exit $rc)"
    fi
    [ "$verdict" = ok ] || failed+=("$name")
    note "step $name: $verdict in $((SECONDS - t0))s (log: $log)"
    return "$rc"
}

# ---- build ----
configure() {
    limited cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DSHARDREC_CUDA=ON -DSHARDREC_CUDA_ARCHS="${CUDA_ARCHS:-90}" -DSHARDREC_WERROR=ON \
        -DSHARDREC_KERNELS_ONLY="$kernels_only" "${cmake_args[@]}"
}
build() {
    # Kernels-only: the kernel tests and bench_ops; otherwise everything, so that ctest -L cuda
    # also finds the NCCL tests.
    local targets=()
    [ "$kernels_only" = ON ] && targets=(--target test_backend_ops test_backend_ops_cuda bench_ops)
    configure && limited cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
}
if has_step configure; then
    run_step configure build.log 0 configure || { note "configure failed: stopping"; exit 1; }
fi
if has_step build; then
    run_step build build.log 0 build || { note "build failed: stopping"; exit 1; }
    rm -f "$out/build.log"  # -Werror: nothing to read in a good one, and the tool brings 8 files
fi
tests="$build_dir/test/test_backend_ops_cuda"
match_case="backend ops: every case matches the float64 reference on CUDA"

# ---- tests: the cuda label through ctest (exit 77 would show as Not Run) ----
if has_step test; then
    run_step test ctest.log 240 ctest --test-dir "$build_dir" -L cuda --output-on-failure \
        --timeout 230
    grep -E "tests passed|Not Run|Skipped|Failed|Passed" "$out/ctest.log" | tail -5 |
        sed 's/^/  /' | tee -a "$summary"
    # ctest counts a skipped test (exit 77) as passed; this check names them, and fails when the
    # kernel tests did not run (no GPU visible). test_comm_nccl_np2 needs two GPUs.
    skipped=$(grep -oE "[0-9]+ - [A-Za-z0-9_]+ \(Skipped\)" "$out/ctest.log" | awk '{print $3}' |
        tr '\n' ' ')
    if [ -n "$skipped" ]; then
        note "step test: not run (exit 77): $skipped"
    fi
    if [[ " $skipped " == *" test_backend_ops_cuda "* ]] || grep -q "Not Run" "$out/ctest.log"; then
        failed+=("test")
        note "step test: the CUDA kernel tests did NOT RUN (no GPU visible?)"
    fi
fi

# ---- compute-sanitizer over the kernel tests ----
sanitizer=$(command -v compute-sanitizer ||
    ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
        /opt/nvidia/*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
sanitizer=${sanitizer:-compute-sanitizer}
if has_step memcheck; then
    run_step memcheck sanitizer.log 200 "$sanitizer" --tool memcheck --leak-check no \
        --error-exitcode 99 "$tests" "$match_case"
    tail -3 "$out/sanitizer.log" | sed 's/^/  /' | tee -a "$summary"
fi
# ---- a training step: MLPerf DLRM-DCNv2 shapes on this GPU (its five 40M-row tables cut to 2M
# rows so rows and Adagrad state fit), batch 6912, with each runtime.gemm_math (the dense layers'
# 96 MFLOP per sample make f32 GEMMs most of a step) ----
mlperf_bench() {  # mlperf_bench [PREFIX...] -- [BENCH ARGS...]
    local prefix=() launcher=() cut=()
    while [ "$1" != -- ]; do prefix+=("$1"); shift; done
    shift
    if command -v mpirun.openmpi >/dev/null; then
        launcher=(mpirun.openmpi --allow-run-as-root -np 1)
    elif command -v mpirun >/dev/null; then
        launcher=(mpirun --allow-run-as-root -np 1)
    fi
    if [ -z "${FULL_TABLES:-}" ]; then
        for t in 0 9 19 20 21; do cut+=(--set "model.tables[$t].num_embeddings=2000000"); done
    fi
    limited "${launcher[@]}" "${prefix[@]}" "$build_dir/shardrec" bench \
        configs/dlrm_dcnv2_mlperf.yaml --set runtime.device=cuda "${cut[@]}" "$@"
}
train_all_math() {
    local math
    for math in ${GEMM_MATHS:-f32 tf32 bf16}; do
        echo "== runtime.gemm_math=$math"
        mlperf_bench -- --steps 20 --warmup 3 --set runtime.gemm_math="$math" || return
    done
}
if has_step train && [ "$kernels_only" = OFF ]; then
    run_step train train_bench.txt 0 train_all_math
    grep -E "^(== |config|step time|throughput|stage time|dense work|ceiling|device|model bytes) " "$out/train_bench.txt" |
        sed 's/^/  /' | tee -a "$summary"
fi

# ---- where a step's GPU time goes: the same step (bf16 GEMMs) with `shardrec bench --profile`
# (the device time of each region of the step, from events), then under Nsight Systems where the
# machine has it, its kernels and copies summed by name ----
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
    /usr/local/cuda/nsight-systems-*/bin/nsys 2>/dev/null | head -1)
profile_step() {
    mlperf_bench -- --steps 20 --warmup 3 --set runtime.gemm_math=bf16 --profile || return
    [ -n "$nsys" ] || { echo "(no nsys on this machine: no per-kernel profile)"; return 0; }
    rm -f /tmp/shardrec-step.nsys-rep /tmp/shardrec-step.sqlite
    mlperf_bench "$nsys" profile --trace=cuda --sample=none --cpuctxsw=none \
        --force-overwrite=true -o /tmp/shardrec-step -- --steps 10 --warmup 3 \
        --set runtime.gemm_math=bf16 &&
        limited "$nsys" stats --report cuda_gpu_kern_sum --report cuda_gpu_mem_time_sum \
            /tmp/shardrec-step.nsys-rep
}
if has_step profile && [ "$kernels_only" = OFF ]; then
    run_step profile profile.txt 150 profile_step
    sed -n '/^profile /,/^[^ ]/p' "$out/profile.txt" | sed 's/^/  /' | tee -a "$summary"
fi

# ---- benchmarks ----
# Every case in f32 (rows in bench_ops.json), then the GEMM-shaped cases again in bf16 math
# against cuBLAS's own bf16 GEMM on the same shapes, and the MLPerf-pooling fused backward with
# the earlier block-per-row hot-row kernel (runtime.hot_row_update block) beside the default
# chunked one (rows in the text only).
bench_all() {
    limited "$build_dir/test/bench_ops" --device cuda --bench-only --reps 20 \
        --json "$out/bench_ops.json" || return
    local filter
    for filter in Linear CrossNet; do
        limited "$build_dir/test/bench_ops" --device cuda --bench-only --reps 20 \
            --gemm-math bf16 --filter "$filter" || return
    done
    echo "== --hot-rows block"
    limited "$build_dir/test/bench_ops" --device cuda --bench-only --reps 20 --hot-rows block \
        --filter "^EmbeddingBagBackwardFused(T=1,F=26" || return
}
if has_step bench; then
    run_step bench bench_ops.txt 300 bench_all
    grep -E "^# |EmbeddingBag|Linear|CrossNet" "$out/bench_ops.txt" | cut -c1-200 | sed 's/^/  /' |
        tee -a "$summary"
fi

if has_step racecheck; then
    run_step racecheck racecheck.log 150 "$sanitizer" --tool racecheck --error-exitcode 99 \
        "$tests" "$match_case"
    tail -3 "$out/racecheck.log" | sed 's/^/  /' | tee -a "$summary"
    # the tool brings 8 files: both sanitizers' logs in one
    cat "$out/racecheck.log" >> "$out/sanitizer.log" && rm -f "$out/racecheck.log"
fi

# ---- where an op's time goes, kernel by kernel: Nsight Compute's duration of each kernel of one
# run of each case (bench_ops --once) ----
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu \
    /usr/local/cuda/nsight-compute-*/ncu 2>/dev/null | head -1)
kernel_times() {
    local cases=${KERNEL_CASES:-"^EmbeddingBagForward(T=1,F=26;^EmbeddingBagBackwardFused(T=1,F=26;^CrossNetForward(B=2048,N=3456;^CrossNetBackward(B=2048,N=3456;^LinearForward(B=2048,I=3456;^LinearBackward(B=2048,I=3456"}
    local filter csv=/tmp/shardrec-kernels.csv
    local IFS=';'
    for filter in $cases; do
        echo "== bench_ops --once --gemm-math ${KERNEL_GEMM_MATH:-bf16} --filter '$filter'"
        limited "$ncu" --metrics gpu__time_duration.sum --csv "$build_dir/test/bench_ops" \
            --device cuda --bench-only --once --gemm-math "${KERNEL_GEMM_MATH:-bf16}" \
            --filter "$filter" > "$csv" 2>&1 || { tail -5 "$csv"; return 1; }
        grep '^# ran' "$csv"
        # One line a kernel: its duration and its name, up to the argument list.
        grep '^"' "$csv" | awk -F'","' 'NR > 1 {
            name = $5; sub(/\(.*/, "", name); v = $NF; gsub(/[",]/, "", v)
            us = $(NF - 1) == "ns" ? v / 1000 : ($(NF - 1) == "ms" ? v * 1000 : v)
            total += us; printf "%10.1f us  %s\n", us, substr(name, 1, 110) }
            END { printf "%10.1f us  total\n", total }'
    done
}
if has_step kernels; then
    if [ -n "$ncu" ]; then
        run_step kernels kernels.txt 150 kernel_times
        grep -E "^==|total" "$out/kernels.txt" | sed 's/^/  /' | tee -a "$summary"
        # the tool brings 8 files: these follow the step's profile
        cat "$out/kernels.txt" >> "$out/profile.txt" && rm -f "$out/kernels.txt"
    else
        note "step kernels: not run (no ncu on this machine)"
    fi
fi

# ---- the baselines users would otherwise pick (bench/baselines/torch_dlrm.py): the same model,
# shapes and batch in plain PyTorch where the machine's Python has torch with CUDA, and in
# TorchRec where it also has torchrec and fbgemm_gpu; their lines follow shardrec's in
# train_bench.txt ----
baseline_all_math() {
    local cut=() math impls=(torch)
    if [ -z "${FULL_TABLES:-}" ]; then
        for t in 0 9 19 20 21; do cut+=(--set "model.tables[$t].num_embeddings=2000000"); done
    fi
    python3 -c 'import torchrec, fbgemm_gpu' 2>/dev/null && impls+=(torchrec)
    for impl in "${impls[@]}"; do
        for math in ${GEMM_MATHS:-f32 tf32 bf16}; do
            echo "== baseline --impl $impl --math $math"
            limited python3 bench/baselines/torch_dlrm.py configs/dlrm_dcnv2_mlperf.yaml \
                --impl "$impl" --shardrec "$build_dir/shardrec" --device cuda --math "$math" \
                --steps 20 --warmup 3 --set runtime.device=cuda "${cut[@]}" || return
        done
    done
}
if has_step baseline && [ "$kernels_only" = OFF ]; then
    if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
        2>/dev/null; then
        run_step baseline baseline.txt 150 baseline_all_math
        grep -E "^(== |baseline|torchrec plan|step time|throughput) " "$out/baseline.txt" |
            sed 's/^/  /' | tee -a "$summary"
        cat "$out/baseline.txt" >> "$out/train_bench.txt" && rm -f "$out/baseline.txt"
    else
        note "step baseline: not run (no python3 with CUDA-enabled torch here)"
    fi
fi

# ---- the tiers (issue: tables bigger than memory): the step with an HBM cache in front of rows
# in host memory against all rows in HBM ----
tiers_all() {
    local bf16=(--set runtime.gemm_math=bf16) pipe
    local cache=(--set sharding.compute_kernel=fused_uvm_caching --set sharding.cache.load_factor=0.2)
    echo "== tiers: fused (rows in HBM)"
    mlperf_bench -- --steps 20 --warmup 3 "${bf16[@]}" || return
    for pipe in sparse_dist prefetch_sparse_dist; do
        echo "== tiers: fused_uvm_caching load_factor 0.2, $pipe"
        mlperf_bench -- --steps 20 --warmup 20 "${bf16[@]}" "${cache[@]}" \
            --set train.pipeline="$pipe" || return
    done
    echo "== tiers: fused_uvm_caching load_factor 0.2, full-size tables"
    FULL_TABLES=1 mlperf_bench -- --steps 20 --warmup 20 "${bf16[@]}" "${cache[@]}" || return
}
if has_step tiers && [ "$kernels_only" = OFF ]; then
    run_step tiers tiers.txt 200 tiers_all
    grep -E "^(== |step time|throughput|cache |memory|host) " "$out/tiers.txt" |
        sed 's/^/  /' | tee -a "$summary"
    cat "$out/tiers.txt" >> "$out/train_bench.txt" && rm -f "$out/tiers.txt"
fi

if [ ${#failed[@]} -eq 0 ]; then
    note "GPU CHECK: all steps ok"
else
    note "GPU CHECK: failed steps: ${failed[*]}"
fi
note "results in $out"
[ ${#failed[@]} -eq 0 ]
