// The measured ceilings of kernels/device_ceilings.h: a device-to-device cudaMemcpyAsync, a
// random-row gather and a plain cuBLAS GEMM, each timed with CUDA events on its own stream after
// a warm-up.
#include <algorithm>
#include <vector>

#include "engine/core/rng.h"
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

// One thread per 16-byte chunk of the output: out row r = table row ids[r].
__global__ void gather_rows_kernel(
    int64_t rows, int64_t chunks_per_row, const int64_t* ids, const uint4* table, uint4* out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * chunks_per_row) {
        return;
    }
    const int64_t r = i / chunks_per_row;
    const int64_t c = i - r * chunks_per_row;
    out[i] = __ldg(table + ids[r] * chunks_per_row + c);
}

}  // namespace

double measure_gather_gbps(
    int device, int64_t row_bytes, size_t table_bytes, int64_t rows, int reps) {
    SR_CHECK(row_bytes > 0 && row_bytes % 16 == 0 && rows > 0 &&
                 table_bytes >= static_cast<size_t>(row_bytes),
             "measure_gather_gbps: {}-byte rows from a {}-byte table", row_bytes, table_bytes);
    Stream stream(Device::cuda(device));
    const cudaStream_t s = cuda_stream(stream);
    const int64_t table_rows = static_cast<int64_t>(table_bytes) / row_bytes;
    std::vector<int64_t> ids(static_cast<size_t>(rows));
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int64_t& id : ids) {  // splitmix64: uniform rows, fixed from run to run
        x += 0x9e3779b97f4a7c15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        id = static_cast<int64_t>((z ^ (z >> 31)) % static_cast<uint64_t>(table_rows));
    }
    DeviceScratch table(stream, static_cast<size_t>(table_rows * row_bytes));
    DeviceScratch out(stream, static_cast<size_t>(rows * row_bytes));
    DeviceScratch dev_ids(stream, ids.size() * sizeof(int64_t));
    SR_CUDA_CHECK(cudaMemsetAsync(table.data(), 1, static_cast<size_t>(table_rows * row_bytes), s));
    SR_CUDA_CHECK(cudaMemcpyAsync(dev_ids.data(), ids.data(), ids.size() * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, s));
    const int64_t chunks_per_row = row_bytes / 16;
    const int64_t threads = rows * chunks_per_row;
    const double ms = median_ms(stream, std::max(1, reps), [&] {
        gather_rows_kernel<<<blocks_for(threads), kBlockSize, 0, s>>>(
            rows, chunks_per_row, dev_ids.as<int64_t>(), table.as<uint4>(), out.as<uint4>());
        SR_CUDA_LAUNCH_CHECK(s);
    });
    stream.synchronize();  // ids (host) and the scratch buffers outlive the runs
    return 2.0 * static_cast<double>(rows * row_bytes) / (ms * 1e-3) / 1e9;
}

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

// Operand words of hashed bits as values in [-1, 1): f32, or two bf16 a word. A GEMM on zeros runs
// at a lower power, so faster than on a model's values.
__global__ void fill_operands_kernel(uint32_t* x, int64_t n, bool bf16) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n)
        return;
    const uint64_t h = rng::mix64(static_cast<uint64_t>(i));
    const auto value = [](uint64_t bits) {
        return static_cast<float>(rng::uniform01(bits) * 2.0 - 1.0);
    };
    const auto bf16_bits = [&](uint64_t bits) {
        return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(value(bits))));
    };
    x[i] = bf16 ? bf16_bits(h) | bf16_bits(rng::mix64(h)) << 16 : __float_as_uint(value(h));
}

double sgemm_time_us(int device, int64_t m, int64_t n, int64_t k, int reps) {
    Stream stream(Device::cuda(device));
    const auto floats = static_cast<size_t>(m * k + k * n + m * n);
    DeviceScratch buffer(stream, floats * sizeof(float));
    float* a = buffer.as<float>();
    float* b = a + m * k;
    float* c = b + k * n;
    // bf16: cuBLAS's own rate, on operands already bf16 (nothing rounded per call), two to a
    // float of the buffer.
    const bool bf16 = gemm_math() == GemmMath::kBf16;
    const auto words = static_cast<int64_t>(floats);
    fill_operands_kernel<<<blocks_for(words), kBlockSize, 0, cuda_stream(stream)>>>(
        reinterpret_cast<uint32_t*>(a), words, bf16);
    SR_CUDA_LAUNCH_CHECK(cuda_stream(stream));
    const auto* a16 = reinterpret_cast<const __nv_bfloat16*>(a);
    const auto* b16 = reinterpret_cast<const __nv_bfloat16*>(b);
    const double ms = median_ms(stream, std::max(1, reps), [&] {
        if (bf16) {
            gemm_bf16(stream, Trans::kNo, Trans::kNo, m, n, k, a16, k, 0, b16, n, 0, 0.f, c, n, 0,
                      1);
        } else {
            sgemm(stream, Trans::kNo, Trans::kNo, m, n, k, a, k, b, n, 0.f, c, n);
        }
    });
    stream.synchronize();
    return ms * 1e3;
}

}  // namespace shardrec::kernels::cuda
