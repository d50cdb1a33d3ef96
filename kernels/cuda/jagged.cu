// The jagged ops on CUDA. Offsets are CUB inclusive sums written after a leading zero. The
// segment permute scans the segment sizes and the lengths, gathers each output segment's extent,
// scans those, and copies with a block per output segment (consecutive threads on consecutive
// words: coalesced). The bucketize has a warp per bag in two passes, a count and a scatter: a
// chunk of 32 ids is grouped by bucket with __match_any_sync, and each id's place is its rank
// among the lower lanes of its group, so ids keep their bag order with no atomics (exact and
// deterministic). Nothing here reads host data or synchronises. Scratch comes from the
// stream-ordered pool (DeviceScratch). Letters: S segments, N values, F features, B batch,
// R buckets.
#include <cub/cub.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/jagged.h"

namespace shardrec::kernels::cuda {
namespace {

// ---- scans ----

size_t scan_temp_bytes(int64_t n, cudaStream_t s) {
    size_t bytes = 0;
    SR_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, bytes,
                                                static_cast<const int64_t*>(nullptr),
                                                static_cast<int64_t*>(nullptr), n, s));
    return bytes;
}

// out[0] = 0, out[i + 1] = in[0] + ... + in[i] for i < n; temp holds scan_temp_bytes(>= n).
void complete_cumsum(
    const int64_t* in, int64_t n, int64_t* out, void* temp, size_t temp_bytes, cudaStream_t s) {
    SR_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(int64_t), s));
    if (n > 0) {
        SR_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp, temp_bytes, in, out + 1, n, s));
    }
}

__device__ __forceinline__ int64_t clamp_index(int64_t i, int64_t hi) {
    return i < 0 ? 0 : (i > hi ? hi : i);
}

// ---- permute_sparse_data ----

// Output segment i's bags and rows: those of input segment permute[i]. Out-of-range entries (a
// broken precondition) are clamped, so every later access stays inside its tensor.
__global__ void segment_extents_kernel(int64_t num_segments,
                                       int64_t num_bags,
                                       const int64_t* permute,
                                       const int64_t* bag_start,
                                       const int64_t* row_start_of_bag,
                                       int64_t* out_bags,
                                       int64_t* out_rows) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= num_segments) {
        return;
    }
    const int64_t k = permute[i];
    const bool valid = k >= 0 && k < num_segments;
    const int64_t first = valid ? clamp_index(bag_start[k], num_bags) : 0;
    const int64_t last = valid ? clamp_index(bag_start[k + 1], num_bags) : 0;
    out_bags[i] = last > first ? last - first : 0;
    const int64_t rows = row_start_of_bag[last] - row_start_of_bag[first];
    out_rows[i] = last > first && rows > 0 ? rows : 0;
}

struct PermuteArgs {
    int64_t num_segments, num_bags, num_rows;
    int64_t row_words;  // words of Word per value row
    const int64_t* permute;
    const int64_t* bag_start;         // [S + 1], input segments
    const int64_t* row_start_of_bag;  // [bags + 1], the offsets of the input lengths
    const int64_t* out_bag_start;     // [S + 1], output segments
    const int64_t* out_row_start;     // [S + 1]
    const int64_t* lengths;
    const float* weights;
    int64_t* out_lengths;
    float* out_weights;
};

// A block per output segment (grid-strided): its lengths, value rows (as Words) and weights.
template <typename Word>
__global__ void permute_segments_kernel(PermuteArgs a, const Word* values, Word* out_values) {
    for (int64_t i = blockIdx.x; i < a.num_segments; i += gridDim.x) {
        const int64_t k = a.permute[i];
        if (k < 0 || k >= a.num_segments) {
            continue;
        }
        const int64_t src_bag = clamp_index(a.bag_start[k], a.num_bags);
        const int64_t dst_bag = a.out_bag_start[i];
        const int64_t bags = a.out_bag_start[i + 1] - dst_bag;
        for (int64_t j = threadIdx.x; j < bags; j += blockDim.x) {
            if (dst_bag + j < a.num_bags) {
                a.out_lengths[dst_bag + j] = a.lengths[src_bag + j];
            }
        }
        const int64_t src_row = a.row_start_of_bag[src_bag];
        const int64_t dst_row = a.out_row_start[i];
        int64_t rows = a.out_row_start[i + 1] - dst_row;
        // Lengths that do not sum to N (a broken precondition) must not copy past either end.
        rows = min(rows, min(a.num_rows - src_row, a.num_rows - dst_row));
        if (src_row < 0 || rows <= 0) {
            continue;
        }
        const Word* src = values + src_row * a.row_words;
        Word* dst = out_values + dst_row * a.row_words;
        for (int64_t j = threadIdx.x; j < rows * a.row_words; j += blockDim.x) {
            dst[j] = src[j];
        }
        if (a.weights != nullptr) {
            for (int64_t j = threadIdx.x; j < rows; j += blockDim.x) {
                a.out_weights[dst_row + j] = a.weights[src_row + j];
            }
        }
    }
}

template <typename Word>
void launch_permute_segments(const PermuteArgs& a,
                             const void* values,
                             void* out_values,
                             cudaStream_t s) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(a.num_segments, 1 << 20));
    permute_segments_kernel<Word><<<blocks, kBlockSize, 0, s>>>(a, static_cast<const Word*>(values),
                                                                static_cast<Word*>(out_values));
    SR_CUDA_LAUNCH_CHECK(s);
}

// ---- block_bucketize_sparse_features ----

// fbgemm's bucket rule (kernels/jagged.h) on the id read as unsigned, as fbgemm reads it: a
// negative id lands past the table instead of in a negative bucket. x / block < R is
// x < block * R without the overflow of the product.
struct Bucketed {
    int64_t bucket, new_id;
};

__device__ __forceinline__ Bucketed bucket_of(int64_t id, int64_t block, int64_t num_buckets) {
    const auto x = static_cast<uint64_t>(id);
    const auto b = static_cast<uint64_t>(block);
    const auto r = static_cast<uint64_t>(num_buckets);
    if (x / b < r) {
        return {static_cast<int64_t>(x / b), static_cast<int64_t>(x % b)};
    }
    return {static_cast<int64_t>(x % r), static_cast<int64_t>(x / r)};
}

struct BucketizeArgs {
    int64_t bags;  // F * B, per bucket
    int64_t batch;
    int64_t num_buckets;
    int64_t num_ids;
    const int64_t* offsets;  // [bags + 1], of the input lengths
    const int64_t* indices;
    const int64_t* block_sizes;
    const float* weights;
    bool bucketize_pos;
};

// The ids [begin, end) of bag `bag`, clamped to [0, N) (lengths that do not sum to N break a
// precondition; they must not read outside indices).
__device__ __forceinline__ void bag_range(const BucketizeArgs& a,
                                          int64_t bag,
                                          int64_t& begin,
                                          int64_t& end) {
    begin = clamp_index(a.offsets[bag], a.num_ids);
    end = clamp_index(a.offsets[bag + 1], a.num_ids);
}

__device__ __forceinline__ int64_t block_size_of(const BucketizeArgs& a, int64_t bag) {
    const int64_t block = a.block_sizes[bag / a.batch];
    return block >= 1 ? block : 1;
}

// Warp per bag: new_lengths[r * bags + bag] = the ids of the bag in bucket r (zeroed before).
// Per chunk of 32 ids, the lowest lane of each bucket's group adds the group's size.
__global__ void bucketize_count_kernel(BucketizeArgs a, int64_t* new_lengths) {
    const int64_t thread = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t bag = thread / kWarpSize;
    const int lane = static_cast<int>(thread % kWarpSize);
    if (bag >= a.bags) {
        return;  // the whole warp: a warp never straddles two bags
    }
    const int64_t block = block_size_of(a, bag);
    int64_t begin, end;
    bag_range(a, bag, begin, end);
    for (int64_t base = begin; base < end; base += kWarpSize) {
        const int64_t i = base + lane;
        const int64_t bucket = i < end ? bucket_of(a.indices[i], block, a.num_buckets).bucket : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, bucket);
        if (i < end && lane == __ffs(peers) - 1) {
            new_lengths[bucket * a.bags + bag] += __popc(peers);
        }
        __syncwarp();  // the next chunk's leader may be another lane
    }
}

// Warp per bag: every id to cursor[its bucketized bag] + its rank among the lower lanes of its
// group; then the group's leader advances the cursor. cursor starts as the exclusive offsets of
// new_lengths (scratch, consumed).
__global__ void bucketize_scatter_kernel(BucketizeArgs a,
                                         int64_t* cursor,
                                         int64_t* new_indices,
                                         float* new_weights,
                                         int64_t* unbucketize_permute) {
    const int64_t thread = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t bag = thread / kWarpSize;
    const int lane = static_cast<int>(thread % kWarpSize);
    if (bag >= a.bags) {
        return;
    }
    const int64_t block = block_size_of(a, bag);
    const unsigned lower_lanes = (1u << lane) - 1u;
    int64_t begin, end;
    bag_range(a, bag, begin, end);
    for (int64_t base = begin; base < end; base += kWarpSize) {
        const int64_t i = base + lane;
        const bool valid = i < end;
        const Bucketed t = valid ? bucket_of(a.indices[i], block, a.num_buckets) : Bucketed{-1, 0};
        const unsigned peers = __match_any_sync(0xffffffffu, t.bucket);
        int64_t pos = 0;
        int64_t* slot = valid ? cursor + t.bucket * a.bags + bag : nullptr;
        if (valid) {
            pos = *slot + __popc(peers & lower_lanes);
        }
        __syncwarp();  // every lane has read its cursor before the leader moves it
        if (valid && lane == __ffs(peers) - 1) {
            *slot += __popc(peers);
        }
        __syncwarp();
        if (valid && pos < a.num_ids) {
            new_indices[pos] = t.new_id;
            if (a.bucketize_pos) {
                new_weights[pos] = static_cast<float>(i - begin);
            } else if (a.weights != nullptr) {
                new_weights[pos] = a.weights[i];
            }
            if (unbucketize_permute != nullptr) {
                unbucketize_permute[i] = pos;
            }
        }
    }
}

}  // namespace

void asynchronous_complete_cumsum(const Tensor& lengths, Tensor& out, Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    const int64_t n = lengths.numel();
    const size_t temp_bytes = scan_temp_bytes(n, s);
    const DeviceScratch temp(stream, temp_bytes);
    complete_cumsum(lengths.data<int64_t>(), n, out.data<int64_t>(), temp.data(), temp_bytes, s);
}

void permute_sparse_data(const Tensor& permute,
                         const Tensor& segment_sizes,
                         const Tensor& lengths,
                         const Tensor& values,
                         const Tensor* weights,
                         Tensor& permuted_lengths,
                         Tensor& permuted_values,
                         Tensor* permuted_weights,
                         Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    const int64_t num_segments = segment_sizes.numel();
    const int64_t num_bags = lengths.numel();
    const int64_t num_rows = values.size(0);
    if (num_segments == 0) {
        return;  // no segments: no bags and no values
    }
    // Scratch: the input segments' bag starts, the lengths' offsets, the output segments' bags
    // and rows, and their starts.
    const int64_t scratch_entries = 5 * (num_segments + 1) + num_bags + 1;
    const DeviceScratch scratch(stream, static_cast<size_t>(scratch_entries) * sizeof(int64_t));
    int64_t* bag_start = scratch.as<int64_t>();
    int64_t* out_bags = bag_start + (num_segments + 1);
    int64_t* out_rows = out_bags + (num_segments + 1);
    int64_t* out_bag_start = out_rows + (num_segments + 1);
    int64_t* out_row_start = out_bag_start + (num_segments + 1);
    int64_t* row_start_of_bag = out_row_start + (num_segments + 1);
    const size_t temp_bytes = scan_temp_bytes(std::max(num_segments, num_bags), s);
    const DeviceScratch temp(stream, temp_bytes);

    complete_cumsum(segment_sizes.data<int64_t>(), num_segments, bag_start, temp.data(), temp_bytes,
                    s);
    complete_cumsum(lengths.data<int64_t>(), num_bags, row_start_of_bag, temp.data(), temp_bytes,
                    s);
    segment_extents_kernel<<<blocks_for(num_segments), kBlockSize, 0, s>>>(
        num_segments, num_bags, permute.data<int64_t>(), bag_start, row_start_of_bag, out_bags,
        out_rows);
    SR_CUDA_LAUNCH_CHECK(s);
    complete_cumsum(out_bags, num_segments, out_bag_start, temp.data(), temp_bytes, s);
    complete_cumsum(out_rows, num_segments, out_row_start, temp.data(), temp_bytes, s);

    PermuteArgs a{};
    a.num_segments = num_segments;
    a.num_bags = num_bags;
    a.num_rows = num_rows;
    a.permute = permute.data<int64_t>();
    a.bag_start = bag_start;
    a.row_start_of_bag = row_start_of_bag;
    a.out_bag_start = out_bag_start;
    a.out_row_start = out_row_start;
    a.lengths = lengths.data<int64_t>();
    a.out_lengths = permuted_lengths.data<int64_t>();
    a.weights = weights != nullptr ? weights->data<float>() : nullptr;
    a.out_weights = permuted_weights != nullptr ? permuted_weights->data<float>() : nullptr;
    // Rows move as the widest word that divides a row and both buffers' alignment.
    const size_t row_bytes = num_rows == 0 ? 0 : values.nbytes() / static_cast<size_t>(num_rows);
    const void* src = values.data_ptr();
    void* dst = permuted_values.data_ptr();
    const auto fits = [&](size_t word) {
        return row_bytes % word == 0 && is_aligned(src, word) && is_aligned(dst, word);
    };
    const size_t word = fits(16) ? 16 : fits(8) ? 8 : fits(4) ? 4 : fits(2) ? 2 : 1;
    a.row_words = static_cast<int64_t>(row_bytes / word);
    switch (word) {
        case 16:
            return launch_permute_segments<uint4>(a, src, dst, s);
        case 8:
            return launch_permute_segments<uint2>(a, src, dst, s);
        case 4:
            return launch_permute_segments<uint32_t>(a, src, dst, s);
        case 2:
            return launch_permute_segments<uint16_t>(a, src, dst, s);
        default:
            return launch_permute_segments<uint8_t>(a, src, dst, s);
    }
}

void block_bucketize_sparse_features(const Tensor& lengths,
                                     const Tensor& indices,
                                     const Tensor& block_sizes,
                                     int64_t num_buckets,
                                     const Tensor* weights,
                                     bool bucketize_pos,
                                     Tensor& new_lengths,
                                     Tensor& new_indices,
                                     Tensor* new_weights,
                                     Tensor* unbucketize_permute,
                                     Stream& stream) {
    const cudaStream_t s = cuda_stream(stream);
    const int64_t bags = lengths.numel();
    const int64_t out_bags = new_lengths.numel();  // R * bags
    const int64_t num_features = block_sizes.numel();
    SR_CUDA_CHECK(cudaMemsetAsync(new_lengths.data_ptr(), 0, new_lengths.nbytes(), s));
    if (bags == 0) {
        return;  // no bags: no ids
    }
    // Scratch: the input offsets [bags + 1], then the cursors (the output offsets) [R*bags + 1].
    const DeviceScratch scratch(stream, static_cast<size_t>(bags + out_bags + 2) * sizeof(int64_t));
    int64_t* offsets = scratch.as<int64_t>();
    int64_t* cursor = offsets + (bags + 1);
    const size_t temp_bytes = scan_temp_bytes(std::max(bags, out_bags), s);
    const DeviceScratch temp(stream, temp_bytes);
    complete_cumsum(lengths.data<int64_t>(), bags, offsets, temp.data(), temp_bytes, s);

    BucketizeArgs a{};
    a.bags = bags;
    a.batch = bags / num_features;
    a.num_buckets = num_buckets;
    a.num_ids = indices.numel();
    a.offsets = offsets;
    a.indices = indices.data<int64_t>();
    a.block_sizes = block_sizes.data<int64_t>();
    a.weights = weights != nullptr ? weights->data<float>() : nullptr;
    a.bucketize_pos = bucketize_pos;
    const unsigned blocks = blocks_for(bags * kWarpSize);
    bucketize_count_kernel<<<blocks, kBlockSize, 0, s>>>(a, new_lengths.data<int64_t>());
    SR_CUDA_LAUNCH_CHECK(s);
    complete_cumsum(new_lengths.data<int64_t>(), out_bags, cursor, temp.data(), temp_bytes, s);
    bucketize_scatter_kernel<<<blocks, kBlockSize, 0, s>>>(
        a, cursor, new_indices.data<int64_t>(),
        new_weights != nullptr ? new_weights->data<float>() : nullptr,
        unbucketize_permute != nullptr ? unbucketize_permute->data<int64_t>() : nullptr);
    SR_CUDA_LAUNCH_CHECK(s);
}

}  // namespace shardrec::kernels::cuda
