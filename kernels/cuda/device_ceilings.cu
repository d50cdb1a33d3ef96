// The measured ceilings of kernels/device_ceilings.h: a device-to-device cudaMemcpyAsync and a
// plain cuBLAS GEMM, each timed with CUDA events on its own stream after a warm-up.
#include <algorithm>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/device_ceilings.h"

namespace shardrec::kernels::cuda {
namespace {

// Median over reps of the event-timed milliseconds of fn() enqueued on `stream`.
template <typename Fn>
double median_ms(Stream& stream, int reps, Fn&& fn) {
    const cudaStream_t s = cuda_stream(stream);
    cudaEvent_t start, stop;
    SR_CUDA_CHECK(cudaEventCreate(&start));
    SR_CUDA_CHECK(cudaEventCreate(&stop));
    fn();  // warm-up
    std::vector<float> ms;
    for (int r = 0; r < reps; ++r) {
        SR_CUDA_CHECK(cudaEventRecord(start, s));
        fn();
        SR_CUDA_CHECK(cudaEventRecord(stop, s));
        SR_CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0.f;
        SR_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
    }
    SR_CUDA_WARN(cudaEventDestroy(start));
    SR_CUDA_WARN(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace

double measure_copy_gbps(int device, size_t bytes, int reps) {
    Stream stream(Device::cuda(device));
    DeviceScratch a(stream, bytes), b(stream, bytes);
    const cudaStream_t s = cuda_stream(stream);
    SR_CUDA_CHECK(cudaMemsetAsync(a.data(), 1, bytes, s));
    const double ms = median_ms(stream, std::max(1, reps), [&] {
        SR_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s));
    });
    stream.synchronize();
    return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

double sgemm_time_us(int device, int64_t m, int64_t n, int64_t k, int reps) {
    Stream stream(Device::cuda(device));
    const auto floats = static_cast<size_t>(m * k + k * n + m * n);
    DeviceScratch buffer(stream, floats * sizeof(float));
    float* a = buffer.as<float>();
    float* b = a + m * k;
    float* c = b + k * n;
    SR_CUDA_CHECK(cudaMemsetAsync(a, 0, floats * sizeof(float), cuda_stream(stream)));
    const double ms = median_ms(stream, std::max(1, reps), [&] {
        sgemm(stream, Trans::kNo, Trans::kNo, m, n, k, a, k, b, n, 0.f, c, n);
    });
    stream.synchronize();
    return ms * 1e3;
}

}  // namespace shardrec::kernels::cuda
