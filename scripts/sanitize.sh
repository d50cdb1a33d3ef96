#!/usr/bin/env bash
# The CPU tests under AddressSanitizer and UndefinedBehaviorSanitizer: a build of its own
# (SHARDREC_SANITIZE=address,undefined, CUDA off) and ctest over it, every process (the test
# executables and the shardrec binary they start, under mpirun too) writing its reports to a log
# file of its own, so an error inside a test that passes is caught as well. Ends non-zero when a
# test fails or any process reported an error; prints the reports.
#   scripts/sanitize.sh [ctest args...]      e.g. scripts/sanitize.sh -R test_modules
# Environment: BUILD_DIR (default build-asan). Not run: the cuda, fuzz and multihost labels, and
# the cases tagged [own_memory], which measure the process's own memory (test/CMakeLists.txt).
# Leak checking is off: Open MPI's own allocations at exit would be reported from every rank.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
build_dir=${BUILD_DIR:-build-asan}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSHARDREC_CUDA=OFF -DSHARDREC_WERROR=ON \
      -DSHARDREC_SANITIZE=address,undefined
cmake --build "$build_dir" -j "$jobs"

reports=$(realpath "$build_dir")/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="detect_leaks=0:log_path=$reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$reports/ubsan"
cd "$build_dir"
set +e
ctest --output-on-failure --timeout 1800 -E "cuda|fuzz|multihost" "$@" 2>&1 | tee ctest-sanitize.log
rc=${PIPESTATUS[0]}
set -e
count=$(find "$reports" -type f | wc -l)
if [ "$count" -gt 0 ]; then
    for f in "$reports"/*; do
        echo "---- $f"
        head -60 "$f"
    done
    echo "scripts/sanitize.sh: $count process(es) reported errors (above; all in $reports)"
    exit 1
fi
echo "scripts/sanitize.sh: no sanitizer reports (not run: the cases tagged [own_memory])"
exit "$rc"
