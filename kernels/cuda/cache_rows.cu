// Cache row moves on CUDA: one warp per payload, the lanes striding over its columns and state
// values. A payload starts at any byte (its size need not be a multiple of 4), so its values are
// read and written through memcpy, which compiles to the widest access the alignment allows.
// Conversions are those of engine/core/dtype.h (nearest even), so the bytes equal the CPU's; a
// slot of the row's own dtype copies its bytes, as the CPU does (a conversion would make NaNs
// canonical).
#include <type_traits>

#include "kernels/cache_rows.h"
#include "kernels/cuda/common.cuh"

namespace shardrec::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = kBlockSize / kWarpSize;

template <typename T>
__device__ __forceinline__ float load_at(const void* p, int64_t i) {
    T v;
    memcpy(&v, static_cast<const char*>(p) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return to_f32(v);
}

template <typename T>
__device__ __forceinline__ void store_at(void* p, int64_t i, float x) {
    const T v = from_f32<T>(x);
    memcpy(static_cast<char*>(p) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

// A row's n optimizer-state floats between its slot and its payload, bit for bit.
template <bool kPack>
__device__ __forceinline__ void move_states(char* payload, float* slot, int64_t n, int lane) {
    for (int64_t j = lane; j < n; j += kWarpSize) {
        if (kPack)
            memcpy(payload + 4 * j, slot + j, 4);
        else
            memcpy(slot + j, payload + 4 * j, 4);
    }
}

// pack: slot (Slot) -> payload (Row); unpack: the other way.
template <typename Slot, typename Row, bool kPack>
__global__ void cache_rows_kernel(CacheRowsArgs a) {
    const int64_t r = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (r >= a.n)
        return;
    const int64_t slot = a.slots[r];
    char* payload = reinterpret_cast<char*>(a.payloads) + r * a.payload_bytes;
    Slot* w = static_cast<Slot*>(a.weights) + slot * a.cols;
    for (int64_t j = lane; j < a.cols; j += kWarpSize) {
        if constexpr (std::is_same_v<Slot, Row>) {  // the bytes as they are, NaN payloads too
            if (kPack)
                memcpy(payload + j * static_cast<int64_t>(sizeof(Row)), w + j, sizeof(Row));
            else
                memcpy(w + j, payload + j * static_cast<int64_t>(sizeof(Row)), sizeof(Row));
        } else if (kPack) {
            store_at<Row>(payload, j, to_f32(w[j]));
        } else {
            w[j] = from_f32<Slot>(load_at<Row>(payload, j));
        }
    }
    char* states = payload + a.cols * static_cast<int64_t>(sizeof(Row));
    move_states<kPack>(states, a.state1 + slot * a.state1_cols, a.state1_cols, lane);
    move_states<kPack>(states + 4 * a.state1_cols, a.state2 + slot * a.state2_cols, a.state2_cols,
                       lane);
}

template <bool kPack, typename Slot>
void launch_row(const CacheRowsArgs& a, cudaStream_t s) {
    const unsigned blocks = blocks_for(a.n, kRowsPerBlock);
    switch (a.row_dtype) {
        case DType::kF16:
            cache_rows_kernel<Slot, Half, kPack><<<blocks, kBlockSize, 0, s>>>(a);
            break;
        case DType::kBF16:
            cache_rows_kernel<Slot, BFloat16, kPack><<<blocks, kBlockSize, 0, s>>>(a);
            break;
        default:
            cache_rows_kernel<Slot, float, kPack><<<blocks, kBlockSize, 0, s>>>(a);
    }
}

template <bool kPack>
void launch(const CacheRowsArgs& a, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    switch (a.slot_dtype) {
        case DType::kF16:
            launch_row<kPack, Half>(a, s);
            break;
        case DType::kBF16:
            launch_row<kPack, BFloat16>(a, s);
            break;
        default:
            launch_row<kPack, float>(a, s);
    }
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace

void cache_rows_pack(const CacheRowsArgs& a, Stream& stream) {
    launch<true>(a, stream);
}

void cache_rows_unpack(const CacheRowsArgs& a, Stream& stream) {
    launch<false>(a, stream);
}

}  // namespace shardrec::kernels::cuda
