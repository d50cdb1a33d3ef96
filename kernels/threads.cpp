#include "kernels/threads.h"

#include <exception>
#include <mutex>

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

void parallel_tasks(int64_t n, const std::function<void(int64_t)>& task) {
    if (n == 1) {  // no parallel region: the task's own regions get the threads
        task(0);
        return;
    }
    std::exception_ptr first;
    std::mutex mutex;
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
    for (int64_t i = 0; i < n; ++i) {
        try {
            task(i);
        } catch (...) {
            const std::lock_guard<std::mutex> lock(mutex);
            if (!first)
                first = std::current_exception();
        }
    }
    if (first)
        std::rethrow_exception(first);
}

}  // namespace shardrec::kernels
