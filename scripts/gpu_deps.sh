#!/usr/bin/env bash
# Run HERE (on a Debian bookworm build machine with network), once, before a GPU check through the
# device tool: fetches what the GPU machine's image lacks for a full build as Debian .debs into
# third_party/gpu-deps/ (git-ignored; about 21 MiB), which the tool carries and
# scripts/gpu_check.sh unpacks there:
#   Catch2 v2 (headers + CMake config), spdlog + fmt, OpenBLAS (+ libgfortran, libquadmath), oneDNN,
#   yaml-cpp, cpp-httplib (shardrec serve; its header also needs the image's OpenSSL, zlib and
#   Brotli headers, or serve is left out of the build), and Open MPI with the libraries its core
#   needs (hwloc, libevent, PMIx; its InfiniBand/OFI/UCX components may lack theirs and are
#   switched off there: one node, shared memory). Open MPI is relocatable: OPAL_PREFIX points it
#   at the unpacked tree.
# The libraries are bookworm builds (glibc 2.36, libstdc++ of GCC 12); they load on any newer
# glibc/libstdc++ (the GPU image's Python 3.12 suggests Ubuntu 24.04, glibc 2.39).
#   scripts/gpu_deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dest=third_party/gpu-deps
packages=(catch2
          libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
          libopenblas-openmp-dev libopenblas0-openmp
          libgfortran5 libquadmath0
          libdnnl-dev libdnnl2 ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
          opencl-clhpp-headers
          libyaml-cpp-dev libyaml-cpp0.7
          libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
          libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libhwloc-plugins libpmix2
          libmunge2 libfabric1 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1
          libpsm-infinipath1 libpsm2-2 libucx0
          libcpp-httplib-dev libcpp-httplib0.11)  # `shardrec serve`, built where it compiles
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
(cd "$dest.tmp" && apt-get download "${packages[@]}")
rm -rf "$dest"
mv "$dest.tmp" "$dest"
du -sh "$dest"
ls "$dest"
