// The CPU thread count of every kernel: OpenMP regions (embedding, interaction, epilogues) and
// OpenBLAS GEMMs. Results never depend on it (kernels split work by output rows or bags).
#pragma once

namespace shardrec::kernels {

void set_cpu_threads(int num_threads);
int cpu_threads();

}  // namespace shardrec::kernels
