// Measured ceilings the benchmarks report against (STYLE.md R9: measured on the machine, never
// taken from spec sheets). The host's in kernels/cpu/host_ceilings.cpp; the CUDA ones with
// CUDA-free signatures, defined in kernels/cuda/device_ceilings.cu, and throwing "built without
// CUDA" in kernels/cuda/disabled.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardrec::kernels {

// Host memcpy bandwidth in GB/s, counting bytes read plus bytes written: median of `reps`
// copies of a `bytes`-byte buffer (far beyond the caches), a slice on each of the kernels' CPU
// threads.
double host_copy_gbps(size_t bytes = size_t{512} << 20, int reps = 5);

// Host random-row read bandwidth in GB/s: `rows` rows of `row_bytes` bytes (a multiple of 4) at
// uniformly random indices of a `table_bytes`-byte table (allocated as the tables are, through
// device_alloc: 2 MiB aligned, MADV_HUGEPAGE), each summed as floats into a per-thread
// accumulator row by a plain loop, prefetching whole rows ahead as the lookup does (the best of 8,
// 16 and 32 rows ahead), on the kernels' CPU threads. Counts the bytes read: the rows plus their
// 8-byte indices. Median of `reps` runs after a warm-up, for each distance. The ceiling of a pooled
// lookup, whose rows are random reads that a copy's streaming ceiling overstates.
double host_random_row_gbps(int64_t row_bytes,
                            size_t table_bytes,
                            int64_t rows = int64_t{1} << 20,
                            int reps = 5);

// Median time in microseconds of one cblas_sgemm of row-major [m, k] x [k, n] fp32 matrices on
// the kernels' CPU threads, over `reps` runs after a warm-up; in gemm_math() bf16, of oneDNN's
// own bf16 matmul of that shape (bf16 operands, weights in its blocked layout, f32 out).
double host_sgemm_time_us(int64_t m, int64_t n, int64_t k, int reps);

}  // namespace shardrec::kernels

namespace shardrec::kernels::cuda {

// Device-to-device copy bandwidth on `device` in GB/s, counting bytes read plus bytes written
// (so it compares with a kernel's read + write traffic): median of `reps` timed copies of a
// `bytes`-byte buffer, timed with CUDA events. One size for every report (2 GiB: 40 times an
// H100's L2), so the ceilings of bench_ops and shardrec bench compare.
double measure_copy_gbps(int device, size_t bytes = size_t{2} << 30, int reps = 10);

// Random-row gather bandwidth on `device` in GB/s (bytes read plus bytes written): `rows` rows
// of `row_bytes` bytes each (a multiple of 16), at uniformly random row indices of a
// `table_bytes`-byte table, copied to a packed output in 16-byte loads, each row's index read
// first, as an embedding lookup with one id per bag does. Median of `reps` event-timed runs. The
// access pattern's own ceiling, next to the copy's: short random rows use DRAM less well.
double measure_gather_gbps(int device,
                           int64_t row_bytes,
                           size_t table_bytes = size_t{2} << 30,
                           int64_t rows = int64_t{1} << 20,
                           int reps = 10);

// Median time in microseconds of one cuBLAS GEMM of row-major [m, k] x [k, n] fp32 matrices
// (in the math mode of kernels::gemm_math(); in bf16, of bf16 matrices: cuBLAS's own bf16 rate,
// with no rounding pass), timed with CUDA events over `reps` runs.
double sgemm_time_us(int device, int64_t m, int64_t n, int64_t k, int reps);

}  // namespace shardrec::kernels::cuda
