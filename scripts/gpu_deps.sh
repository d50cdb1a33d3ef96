#!/usr/bin/env bash
# Run HERE (on a Debian bookworm build machine with network), once, before a GPU check through the
# device tool: fetches what the GPU machine's image lacks for a kernels-only build
# (SHARDREC_KERNELS_ONLY: no MPI, yaml-cpp or engine) as Debian .debs into third_party/gpu-deps/
# (git-ignored; about 10 MiB), which the tool carries and scripts/gpu_check.sh unpacks there:
#   Catch2 v2 (headers + CMake config), spdlog + fmt, OpenBLAS (+ libgfortran, libquadmath).
# The libraries are bookworm builds (glibc 2.36, libstdc++ of GCC 12); they load on any newer
# glibc/libstdc++ (the GPU image's Python 3.12 suggests Ubuntu 24.04, glibc 2.39).
#   scripts/gpu_deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dest=third_party/gpu-deps
packages=(catch2
          libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
          libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0
          libgfortran5 libquadmath0)
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
(cd "$dest.tmp" && apt-get download "${packages[@]}")
rm -rf "$dest"
mv "$dest.tmp" "$dest"
du -sh "$dest"
ls "$dest"
