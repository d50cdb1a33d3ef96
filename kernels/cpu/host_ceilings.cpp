// The host's measured ceilings (kernels/device_ceilings.h): memcpy bandwidth and cblas_sgemm
// time, each the median of timed repetitions after a warm-up.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/linear.h"
#include "kernels/device_ceilings.h"

namespace shardrec::kernels {
namespace {

template <typename Fn>
double median_s(int reps, Fn&& fn) {
    fn();  // warm-up: pages touched, threads started
    std::vector<double> s;
    for (int r = 0; r < std::max(1, reps); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
}

}  // namespace

double host_copy_gbps(size_t bytes, int reps) {
    std::vector<char> a(bytes, 1), b(bytes, 2);
    // On the kernels' threads, a slice each: one core alone cannot draw a server's bandwidth.
    const double s = median_s(reps, [&] {
#pragma omp parallel
        {
#ifdef _OPENMP
            const auto n = static_cast<size_t>(omp_get_num_threads());
            const auto i = static_cast<size_t>(omp_get_thread_num());
#else
            const size_t n = 1, i = 0;
#endif
            const size_t begin = bytes / n * i, end = i + 1 == n ? bytes : bytes / n * (i + 1);
            std::memcpy(b.data() + begin, a.data() + begin, end - begin);
        }
    });
    return 2.0 * static_cast<double>(bytes) / s / 1e9;
}

double host_sgemm_time_us(int64_t m, int64_t n, int64_t k, int reps) {
    if (gemm_math() == GemmMath::kBf16) {
        return cpu::onednn_bf16_matmul_time_us(m, n, k, reps);
    }
    std::vector<float> a(static_cast<size_t>(m * k), 0.5f), b(static_cast<size_t>(k * n), 0.25f),
        c(static_cast<size_t>(m * n));
    const double s = median_s(reps, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                    static_cast<int>(n), static_cast<int>(k), 1.0f, a.data(), static_cast<int>(k),
                    b.data(), static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
    });
    return s * 1e6;
}

}  // namespace shardrec::kernels
