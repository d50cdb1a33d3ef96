#!/usr/bin/env bash
# Trains the built-in default: DLRM on synthetic data, CPU, under mpirun (NP ranks).
#   scripts/train.sh [CONFIG] [shardrec train args...]     (default configs/quickstart.yaml)
# Environment: BUILD_DIR (default build), NP (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

build_dir=${BUILD_DIR:-build}
config=${1:-configs/quickstart.yaml}
shift || true
if [ ! -x "$build_dir/shardrec" ]; then
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSHARDREC_CUDA="${SHARDREC_CUDA:-AUTO}"
fi
cmake --build "$build_dir" -j "$(nproc 2>/dev/null || echo 2)" --target shardrec

# Root needs --allow-run-as-root; --oversubscribe lets 2 ranks share a small machine.
mpi_flags=(--oversubscribe)
if [ "$(id -u)" -eq 0 ]; then mpi_flags+=(--allow-run-as-root); fi
# A SIGTERM to mpirun reaches the ranks this many seconds later, and they have as long again to
# save the last finished step before it kills them: 1 s by default, 10 s here (as
# scripts/slurm/train.sbatch).
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-10}
exec mpirun -np "${NP:-2}" "${mpi_flags[@]}" "$build_dir/shardrec" train "$config" "$@"
