// Aggregate-then-update, shared by the pooled and the sequence embedding backward (see the
// header). Sort: LSD radix over the row bits, on the threads for large batches. Update: OpenMP
// over touched rows in dynamic chunks; each row's duplicates are summed in id order into a
// per-thread D-float accumulator, so nothing of size [U, D] is written.
#include "kernels/cpu/embedding_bag_update.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/optimizer_rules.h"

namespace shardrec::kernels::cpu::detail {
namespace {

// Workspace slots (EmbeddingBackwardWorkspace::buffer).
enum Slot : size_t {
    kRows,
    kGradOffsets,
    kScales,
    kSortKeysA,
    kSortKeysB,
    kSegmentBegin,
    kAccumulators,
};

constexpr int kMaxDigitBits = 11;
constexpr int64_t kRowsPerChunk = 64;      // >= 2 * kPrefetchSegments
constexpr int64_t kMinRowsPerThread = 64;  // below this a parallel region costs more than it saves
// Rows ahead to prefetch in the update loop. A touched row is read and written back, so more
// must be in flight than in the lookup: on a 2 GiB table (bench_ops, 2 cores) 16 ahead moved
// 3.3-3.7 GB/s against 2.8-2.9 at 4 (8: 3.3).
constexpr int kPrefetchSegments = 16;
// Contributions of a row (ids of a hot row: thousands on Zipf ids) prefetched ahead: the first
// ones by the segments before, the rest within the row's own sum.
constexpr int64_t kPrefetchContributions = 8;

template <typename T>
T* slot_buffer(EmbeddingBackwardWorkspace& ws, Slot slot, int64_t count) {
    return static_cast<T*>(ws.buffer(slot, count * static_cast<int64_t>(sizeof(T)), Device::cpu()));
}

// Ids from which the sort's passes run on the threads. Below, one thread: a batch's ids are few
// next to the rows they move, and every parallel region is a barrier that costs a scheduler
// quantum when another process holds the core. Above, the sort was about a tenth of the fused
// update's time with the other thread idle (2 GiB table, 655 K ids, bench_ops).
constexpr int64_t kParallelSortIds = int64_t{1} << 17;

using DigitCounts = std::array<int64_t, (size_t{1} << kMaxDigitBits)>;

// Stable counting-sort pass on the digit of `keys_in` at `shift`, over `chunks` contiguous
// chunks at once (one a thread; `counts` holds one DigitCounts a chunk): each chunk counts its
// digits, then writes its keys after the same digit's keys of the chunks before it, so the
// result is the one-thread pass's whatever the chunk count.
void radix_pass(int64_t n,
                int shift,
                uint64_t mask,
                const uint64_t* keys_in,
                uint64_t* keys_out,
                int chunks,
                DigitCounts* counts) {
    const auto chunk_of = [&](int c) {
        return std::pair<int64_t, int64_t>{n * c / chunks, n * (c + 1) / chunks};
    };
#pragma omp parallel for num_threads(chunks) if (chunks > 1) schedule(static, 1)
    for (int c = 0; c < chunks; ++c) {
        DigitCounts& count = counts[c];
        count.fill(0);
        const auto [lo, hi] = chunk_of(c);
        for (int64_t i = lo; i < hi; ++i) {
            ++count[(keys_in[i] >> shift) & mask];
        }
    }
    int64_t sum = 0;
    for (uint64_t d = 0; d <= mask; ++d) {
        for (int c = 0; c < chunks; ++c) {
            const int64_t k = counts[c][d];
            counts[c][d] = sum;
            sum += k;
        }
    }
#pragma omp parallel for num_threads(chunks) if (chunks > 1) schedule(static, 1)
    for (int c = 0; c < chunks; ++c) {
        DigitCounts& count = counts[c];
        const auto [lo, hi] = chunk_of(c);
        for (int64_t i = lo; i < hi; ++i) {
            keys_out[count[(keys_in[i] >> shift) & mask]++] = keys_in[i];
        }
    }
}

int bits_for(int64_t max_value) {  // bits to represent [0, max_value]
    return max_value > 0 ? 64 - __builtin_clzll(static_cast<uint64_t>(max_value)) : 1;
}

// Always inlined: GCC deems a function that only prefetches pure, and deletes calls to it.
[[gnu::always_inline]] inline void prefetch_row(const void* p, int64_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (int64_t b = 0; b < bytes; b += 64) {
        __builtin_prefetch(c + b, 1, 1);
    }
}

// Sum of the contributions of segment s into acc[0:D], in id order.
inline void reduce_segment(const RowContributions& c,
                           const RowSegments& sg,
                           int64_t s,
                           const float* grad,
                           int64_t dim,
                           float* __restrict acc) {
    for (int64_t d = 0; d < dim; ++d) {
        acc[d] = 0.f;
    }
    const int64_t end = sg.begin[s + 1];
    for (int64_t k = sg.begin[s]; k < end; ++k) {
        if (k + 2 * kPrefetchContributions < end) {
            const int64_t ahead = sg.index(k + 2 * kPrefetchContributions);
            __builtin_prefetch(c.grad_offsets + ahead, 0, 1);
            __builtin_prefetch(c.scales + ahead, 0, 1);
        }
        if (k + kPrefetchContributions < end) {
            prefetch_row(grad + c.grad_offsets[sg.index(k + kPrefetchContributions)], dim * 4);
        }
        const int64_t n = sg.index(k);
        const float* __restrict g = grad + c.grad_offsets[n];  // g is grad_out's row for id n
        const float scale = c.scales[n];
        for (int64_t d = 0; d < dim; ++d) {
            acc[d] += scale * g[d];
        }
    }
}

// ---- fused optimizer rules (kernels/embedding_optimizer.h), one row ----

struct UpdateConstants {
    float lr, eps, beta1, beta2, weight_decay;
    float bias_correction1, bias_correction2;  // Adam: 1 - beta^step
};

// The rule on a row of f32 weights, in place.
template <OptimType kOpt>
void update_row_f32(float* __restrict w,
                    float* __restrict s1,
                    float* __restrict s2,
                    float* __restrict g,
                    int64_t dim,
                    const UpdateConstants& k) {
    if (k.weight_decay != 0.f) {
        for (int64_t d = 0; d < dim; ++d) {
            g[d] = rules::weight_decay(g[d], w[d], k.weight_decay);
        }
    }
    if constexpr (kOpt == OptimType::kSgd) {
        for (int64_t d = 0; d < dim; ++d) {
            w[d] = rules::sgd(w[d], g[d], k.lr);
        }
    } else if constexpr (kOpt == OptimType::kExactAdagrad) {
        for (int64_t d = 0; d < dim; ++d) {
            w[d] = rules::adagrad(w[d], g[d], s1[d], k.lr, k.eps);
        }
    } else if constexpr (kOpt == OptimType::kExactRowWiseAdagrad) {
        const float mean_sq = dot_lanes(g, g, dim) / static_cast<float>(dim);
        const float rate = rules::rowwise_adagrad_rate(s1[0], mean_sq, k.lr, k.eps);
        for (int64_t d = 0; d < dim; ++d) {
            w[d] = rules::sgd(w[d], g[d], rate);
        }
    } else {
        static_assert(kOpt == OptimType::kAdam);
        for (int64_t d = 0; d < dim; ++d) {
            rules::adam_moments(g[d], k.beta1, k.beta2, s1[d], s2[d]);
            w[d] = rules::adam(w[d], s1[d], s2[d], k.lr, k.bias_correction1, k.bias_correction2,
                               k.eps);
        }
    }
}

// A row of any storage dtype: an f16 or bf16 row goes to f32 in `wf` (exact), takes the f32
// rule and is rounded back once per element, as converting at each access would (the same bits),
// with the vector conversions where the CPU has them.
template <typename Weight, OptimType kOpt>
void update_row(Weight* __restrict w,
                float* __restrict s1,
                float* __restrict s2,
                float* __restrict g,
                int64_t dim,
                const UpdateConstants& k,
                float* __restrict wf) {
    if constexpr (std::is_same_v<Weight, float>) {
        (void)wf;
        update_row_f32<kOpt>(w, s1, s2, g, dim, k);
    } else {
        const int64_t whole = vector_loads() ? dim / 16 * 16 : 0;
        if (whole > 0)
            load_f32_vector(w, wf, whole);
        for (int64_t d = whole; d < dim; ++d)
            wf[d] = load_f32(w[d]);
        update_row_f32<kOpt>(wf, s1, s2, g, dim, k);
        if (whole > 0)
            store_f32_vector(wf, w, whole);
        for (int64_t d = whole; d < dim; ++d)
            w[d] = from_float<Weight>(wf[d]);
    }
}

template <typename Weight, OptimType kOpt>
void apply_fused_update_typed(const RowContributions& c,
                              const RowSegments& sg,
                              const float* grad,
                              const UpdateConstants& k,
                              Weight* weights,
                              float* state1,
                              float* state2,
                              int64_t dim,
                              float* accumulators,
                              int64_t acc_stride) {
    // State row stride: row-wise Adagrad keeps one float per row, the others D.
    const int64_t state_dim = kOpt == OptimType::kExactRowWiseAdagrad ? 1 : dim;
    const int64_t num_segments = sg.num_segments;
    // Dynamic chunks of kRowsPerChunk segments (a thread the OS preempts holds up at most one),
    // each thread claiming its next chunk when it starts one, so that its prefetches run ahead
    // into that chunk instead of into the other threads' rows (a quarter of each chunk's
    // segments went unprefetched when they stopped at the chunk's end).
    std::atomic<int64_t> next_chunk{0};
#pragma omp parallel if (num_segments >= 2 * kMinRowsPerThread)
    {
#ifdef _OPENMP
        float* acc = accumulators + acc_stride * omp_get_thread_num();
#else
        float* acc = accumulators;
#endif
        float* row = acc + acc_stride / 2;  // a 16-bit row in f32 (update_row)
        const auto claim = [&] {
            return std::min(next_chunk.fetch_add(kRowsPerChunk, std::memory_order_relaxed),
                            num_segments);
        };
        int64_t lo = claim(), next = claim();
        // The segment `ahead` places after s in this thread's order, or -1 (kRowsPerChunk >=
        // 2 * kPrefetchSegments: it lies in this chunk or the next).
        const auto later = [&](int64_t s, int64_t ahead) -> int64_t {
            const int64_t end = std::min(lo + kRowsPerChunk, num_segments);
            if (s + ahead < end) {
                return s + ahead;
            }
            const int64_t t = next + (s + ahead - end);
            return t < std::min(next + kRowsPerChunk, num_segments) ? t : -1;
        };
        while (lo < num_segments) {
            const int64_t end = std::min(lo + kRowsPerChunk, num_segments);
            for (int64_t s = lo; s < end; ++s) {
                // Prefetch what a later segment reads: its weight and state rows and gradient
                // rows (written out here: GCC deletes calls to a helper, or a lambda, that only
                // loads and prefetches). Two stages: the ids' grad offsets and scales
                // (scattered: the ids are in row order now) 2 * kPrefetchSegments ahead, so that
                // the rows' prefetch finds them cached (measured: 30 % of the loop's time was
                // that load's miss).
                if (const int64_t a = later(s, 2 * kPrefetchSegments); a >= 0) {
                    const int64_t first = sg.begin[a];
                    const int64_t stop =
                        std::min(sg.begin[a + 1], first + 2 * kPrefetchContributions);
                    for (int64_t i = first; i < stop; ++i) {
                        __builtin_prefetch(c.grad_offsets + sg.index(i), 0, 1);
                        __builtin_prefetch(c.scales + sg.index(i), 0, 1);
                    }
                }
                if (const int64_t a = later(s, kPrefetchSegments); a >= 0) {
                    const int64_t r = sg.row(sg.begin[a]);
                    prefetch_row(weights + r * dim, dim * static_cast<int64_t>(sizeof(Weight)));
                    if (state1) {
                        prefetch_row(state1 + r * state_dim, state_dim * 4);
                    }
                    if (state2) {
                        prefetch_row(state2 + r * state_dim, state_dim * 4);
                    }
                    const int64_t first = sg.begin[a];
                    const int64_t stop = std::min(sg.begin[a + 1], first + kPrefetchContributions);
                    for (int64_t i = first; i < stop; ++i) {
                        prefetch_row(grad + c.grad_offsets[sg.index(i)], dim * 4);
                    }
                }
                const int64_t r = sg.row(sg.begin[s]);
                reduce_segment(c, sg, s, grad, dim, acc);
                update_row<Weight, kOpt>(
                    weights + r * dim, state1 ? state1 + r * state_dim : nullptr,
                    state2 ? state2 + r * state_dim : nullptr, acc, dim, k, row);
            }
            lo = next;
            next = claim();
        }
    }
}

}  // namespace

int max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

RowContributions alloc_contributions(int64_t count, EmbeddingBackwardWorkspace& workspace) {
    RowContributions c;
    c.count = count;
    c.rows = slot_buffer<int64_t>(workspace, kRows, count);
    c.grad_offsets = slot_buffer<int64_t>(workspace, kGradOffsets, count);
    c.scales = slot_buffer<float>(workspace, kScales, count);
    return c;
}

RowSegments sort_by_row(const RowContributions& c,
                        int64_t num_rows,
                        EmbeddingBackwardWorkspace& workspace) {
    const int64_t n = c.count;
    const int index_bits = bits_for(n - 1);
    const int row_bits = bits_for(num_rows - 1);
    // 2^64 rows * ids is far beyond any batch; the packing relies on it.
    SR_CHECK(index_bits + row_bits <= 64,
             "embedding backward: {} rows and {} ids do not pack in 64 bits", num_rows, n);
    uint64_t* keys[2] = {slot_buffer<uint64_t>(workspace, kSortKeysA, n),
                         slot_buffer<uint64_t>(workspace, kSortKeysB, n)};
    const int chunks = n >= kParallelSortIds ? max_threads() : 1;
#pragma omp parallel for num_threads(chunks) if (chunks > 1)
    for (int64_t i = 0; i < n; ++i) {
        keys[1][i] = (static_cast<uint64_t>(c.rows[i]) << index_bits) | static_cast<uint64_t>(i);
    }
    // Passes of at most kMaxDigitBits over the row bits only: 2 passes for 1M rows. The index
    // bits start in ascending order, and every pass is stable.
    const int passes = (row_bits + kMaxDigitBits - 1) / kMaxDigitBits;
    const int digit_bits = (row_bits + passes - 1) / passes;
    const uint64_t mask = (uint64_t{1} << digit_bits) - 1;
    DigitCounts one;
    std::vector<DigitCounts> many(chunks > 1 ? static_cast<size_t>(chunks) : 0);
    DigitCounts* counts = chunks > 1 ? many.data() : &one;
    for (int p = 0; p < passes; ++p) {
        radix_pass(n, index_bits + p * digit_bits, mask, keys[(p + 1) & 1], keys[p & 1], chunks,
                   counts);
    }
    const uint64_t* sorted = keys[(passes + 1) & 1];
    int64_t* begin = slot_buffer<int64_t>(workspace, kSegmentBegin, n + 1);
    int64_t num_segments = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (i == 0 || (sorted[i] >> index_bits) != (sorted[i - 1] >> index_bits)) {
            begin[num_segments++] = i;
        }
    }
    begin[num_segments] = n;
    return RowSegments{num_segments, begin, sorted, index_bits};
}

void apply_fused_update(const RowContributions& c,
                        const RowSegments& segments,
                        const float* grad,
                        const FusedOptimizerParams& optim,
                        Tensor& weights,
                        Tensor* state1,
                        Tensor* state2,
                        EmbeddingBackwardWorkspace& workspace) {
    const int64_t dim = weights.size(1);
    // A thread's gradient accumulator and f32 row, each a multiple of a cache line: no false
    // sharing.
    const int64_t acc_stride = 2 * ((dim + 15) / 16 * 16);
    float* acc = slot_buffer<float>(workspace, kAccumulators, acc_stride * max_threads());
    const UpdateConstants k{
        optim.learning_rate,
        optim.eps,
        optim.beta1,
        optim.beta2,
        optim.weight_decay,
        static_cast<float>(rules::adam_bias_correction(optim.beta1, optim.step)),
        static_cast<float>(rules::adam_bias_correction(optim.beta2, optim.step))};
    float* s1 = state1 ? state1->data<float>() : nullptr;
    float* s2 = state2 ? state2->data<float>() : nullptr;
    visit_float_dtype(weights.dtype(), [&](auto tag) {
        using Weight = typename decltype(tag)::type;
        Weight* w = weights.data<Weight>();
        auto run = [&](auto opt) {
            apply_fused_update_typed<Weight, decltype(opt)::value>(c, segments, grad, k, w, s1, s2,
                                                                   dim, acc, acc_stride);
        };
        switch (optim.type) {
            case OptimType::kSgd:
                return run(std::integral_constant<OptimType, OptimType::kSgd>{});
            case OptimType::kExactAdagrad:
                return run(std::integral_constant<OptimType, OptimType::kExactAdagrad>{});
            case OptimType::kExactRowWiseAdagrad:
                return run(std::integral_constant<OptimType, OptimType::kExactRowWiseAdagrad>{});
            case OptimType::kAdam:
                return run(std::integral_constant<OptimType, OptimType::kAdam>{});
        }
    });
}

void write_dense_gradient(const RowContributions& c,
                          const RowSegments& sg,
                          const float* grad,
                          Tensor& grad_weights) {
    const int64_t dim = grad_weights.size(1);
    const int64_t rows = grad_weights.size(0);
    float* out = grad_weights.data<float>();
    // Zero in parallel row blocks (the memset is most of the traffic for a large table).
#pragma omp parallel for schedule(static) if (rows >= 2 * kMinRowsPerThread)
    for (int64_t r = 0; r < rows; r += kMinRowsPerThread) {
        const int64_t end = std::min(rows, r + kMinRowsPerThread);
        std::memset(out + r * dim, 0, static_cast<size_t>((end - r) * dim) * sizeof(float));
    }
#pragma omp parallel for schedule(static) if (sg.num_segments >= 2 * kMinRowsPerThread)
    for (int64_t s = 0; s < sg.num_segments; ++s) {
        reduce_segment(c, sg, s, grad, dim, out + sg.row(sg.begin[s]) * dim);
    }
}

}  // namespace shardrec::kernels::cpu::detail
