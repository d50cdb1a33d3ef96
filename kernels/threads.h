// The CPU thread count of every kernel: OpenMP regions (embedding, interaction, epilogues) and
// OpenBLAS GEMMs. The kernels' results never depend on it (they split work by output rows or
// bags); OpenBLAS's f32 GEMMs' may on some CPUs, unless set_row_invariant_gemms (kernels/linear.h).
#pragma once

#include <cstdint>
#include <functional>

namespace shardrec::kernels {

void set_cpu_threads(int num_threads);
int cpu_threads();

// Runs task(i) for each i in [0, n) once, on the CPU threads, in any order: for independent
// pieces of work (each writes only its own state). The first exception a task throws is
// rethrown here once every task has ended.
void parallel_tasks(int64_t n, const std::function<void(int64_t)>& task);

}  // namespace shardrec::kernels
