#!/usr/bin/env bash
# Installs the Debian packages shardrec builds against. Safe to run twice: it only installs what
# is missing. Needs root or sudo.
set -euo pipefail

packages=(build-essential cmake pkg-config
          libopenmpi-dev openmpi-bin
          libyaml-cpp-dev libspdlog-dev libfmt-dev catch2
          libopenblas-openmp-dev  # OpenBLAS on the OpenMP threads (CMakeLists.txt)
          libdnnl-dev ocl-icd-opencl-dev  # oneDNN; its CMake config asks for OpenCL
          # `shardrec serve`: cpp-httplib, a well-kept single-header HTTP/1.1 server in Debian
          # (built there as a library); curl for its end-to-end test
          libcpp-httplib-dev curl
          time  # /usr/bin/time: peak RSS in the tests and benchmarks
          clang-14 libclang-rt-14-dev)  # the libFuzzer tests (fuzz/); skipped without them

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
fi
echo "setup.sh: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
