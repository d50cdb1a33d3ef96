// SR_AVX512_CLONES: the CPU kernels' loops built for AVX-512 beside baseline x86-64.
#pragma once

// A function built twice, for AVX-512 and for baseline x86-64, the build chosen when the program
// loads from the CPU's features. (A clone named "arch=CPU" is chosen by the CPU's model instead:
// an "arch=skylake-avx512" clone never runs on Sapphire Rapids or Zen 4.) The avx512f build may
// use FMA instructions; the kernels are compiled with -ffp-contract=off (CMakeLists.txt), so no
// a * b + c becomes one and both builds round alike, bit for bit.
#define SR_AVX512_CLONES __attribute__((target_clones("avx512f", "default")))
