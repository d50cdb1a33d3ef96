#include "kernels/threads.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "engine/core/error.h"
#include "kernels/linear.h"

namespace shardrec::kernels {

void set_cpu_threads(int num_threads) {
    SR_CHECK(num_threads >= 1, "thread count must be >= 1, got {}", num_threads);
#if defined(_OPENMP)
    omp_set_num_threads(num_threads);
#endif
    set_blas_num_threads(num_threads);
}

int cpu_threads() {
    return blas_num_threads();
}

}  // namespace shardrec::kernels
