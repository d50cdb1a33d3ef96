// The host's measured ceilings (kernels/device_ceilings.h): memcpy bandwidth, random-row read
// bandwidth and cblas_sgemm time, each the median of timed repetitions after a warm-up.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/core/allocator.h"
#include "engine/core/error.h"
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

// acc[0:width] += the rows index[begin:end) of table, prefetching whole rows `ahead` indices
// ahead (up to `rows`), as the lookup does.
[[gnu::always_inline]] inline void sum_rows(const float* table,
                                            const int64_t* index,
                                            int64_t begin,
                                            int64_t end,
                                            int64_t rows,
                                            int64_t width,
                                            int64_t ahead,
                                            float* __restrict acc) {
    for (int64_t n = begin; n < end; ++n) {
        if (n + ahead < rows) {
            const char* p = reinterpret_cast<const char*>(table + index[n + ahead] * width);
            for (int64_t b = 0; b < width * 4; b += 64) {
                __builtin_prefetch(p + b, 0, 0);
            }
        }
        const float* __restrict row = table + index[n] * width;
        for (int64_t d = 0; d < width; ++d) {
            acc[d] += row[d];
        }
    }
}

// The loop in the widest vectors the lookup may use (kernels/cpu/embedding_bag.cpp picks AVX-512
// at run time too): with SSE alone the loop's own instructions, not memory, bound it.
void sum_rows_baseline(const float* table,
                       const int64_t* index,
                       int64_t begin,
                       int64_t end,
                       int64_t rows,
                       int64_t width,
                       int64_t ahead,
                       float* acc) {
    sum_rows(table, index, begin, end, rows, width, ahead, acc);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void sum_rows_avx512(const float* table,
                                                        const int64_t* index,
                                                        int64_t begin,
                                                        int64_t end,
                                                        int64_t rows,
                                                        int64_t width,
                                                        int64_t ahead,
                                                        float* acc) {
    sum_rows(table, index, begin, end, rows, width, ahead, acc);
}

bool cpu_has_avx512f() {
    return __builtin_cpu_supports("avx512f");
}
#else
constexpr auto sum_rows_avx512 = sum_rows_baseline;

bool cpu_has_avx512f() {
    return false;
}
#endif

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

double host_random_row_gbps(int64_t row_bytes, size_t table_bytes, int64_t rows, int reps) {
    SR_CHECK(row_bytes > 0 && row_bytes % 4 == 0 && table_bytes >= static_cast<size_t>(row_bytes),
             "host_random_row_gbps: rows of {} bytes from a {}-byte table", row_bytes, table_bytes);
    const int64_t width = row_bytes / 4;
    const auto table_rows = static_cast<int64_t>(table_bytes / static_cast<size_t>(row_bytes));
    const size_t bytes = static_cast<size_t>(table_rows * row_bytes);
    auto* table = static_cast<float*>(device_alloc(Device::cpu(), bytes));
    // Touched in parallel, as a table's initialisation does, so its pages are mapped (and, under
    // MADV_HUGEPAGE, huge) before the timing.
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < table_rows; ++r) {
        std::fill(table + r * width, table + (r + 1) * width, 1.f);
    }
    std::vector<int64_t> index(static_cast<size_t>(rows));
    uint64_t x = 0x9e3779b97f4a7c15ull;  // splitmix64: uniform enough, and the same every run
    for (int64_t& i : index) {
        x += 0x9e3779b97f4a7c15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        i = static_cast<int64_t>((z ^ (z >> 31)) % static_cast<uint64_t>(table_rows));
    }
    // Prefetching whole rows `ahead` indices ahead, the lookup's way; the best of a few
    // distances, so that a kernel that tunes its own cannot beat its ceiling.
    const bool avx512 = cpu_has_avx512f();
    float sink = 0;
    double best_s = 0;
    for (const int64_t ahead : {8, 16, 32}) {
        const double s = median_s(reps, [&] {
#pragma omp parallel reduction(+ : sink)
            {
                std::vector<float> acc(static_cast<size_t>(width), 0.f);
#ifdef _OPENMP
                const auto n = static_cast<int64_t>(omp_get_num_threads());
                const auto i = static_cast<int64_t>(omp_get_thread_num());
#else
                const int64_t n = 1, i = 0;
#endif
                const int64_t begin = rows / n * i, end = i + 1 == n ? rows : rows / n * (i + 1);
                (avx512 ? sum_rows_avx512 : sum_rows_baseline)(table, index.data(), begin, end,
                                                               rows, width, ahead, acc.data());
                sink += acc[0];  // keeps the sums live
            }
        });
        best_s = best_s == 0 ? s : std::min(best_s, s);
    }
    device_free(Device::cpu(), table, bytes);
    SR_CHECK(sink > 0, "host_random_row_gbps: the rows summed to {}", sink);
    return static_cast<double>(rows) * static_cast<double>(row_bytes + 8) / best_s / 1e9;
}

double host_sgemm_time_us(int64_t m, int64_t n, int64_t k, int reps) {
    if (gemm_math() == GemmMath::kBf16 && cpu::onednn_bf16_available()) {
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
