// Element-wise tensor arithmetic the models need between their modules (torch's in-place add_):
// DeepFM sums the gradients that reach one input through two branches; the sharded collections'
// output dists place column shards, add row shards, divide MEAN bags after the sum and divide
// gradients by the world size on column blocks (columns_axpy), on whichever device their tensors
// live. fill_ sets the embedding optimizers' accumulators to their initial value.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

//   a   any shape, f32, updated in place: a += b
//   b   the same numel, f32, on a's device (it may not alias a)
void add_(Tensor& a, const Tensor& b, Stream& stream);

//   a      any shape, f32, contiguous, set in place: a[i] = value for every i (torch's fill_)
//   which  null, or i64 [N] on a's device: only rows which[i] of a (as [R, numel / R], R =
//          a.size(0)) are set, each in [0, R) (checked on the CPU; the CUDA kernel skips
//          others), repeats allowed (the optimizer state of evicted rows back to zero)
void fill_(Tensor& a, float value, Stream& stream, const Tensor* which = nullptr);

// How columns_axpy scales: a division where the unsharded computation divides (MEAN pooling:
// the sum, then / L; the gradient division by the world size, torch's div_), so sharded results
// equal unsharded ones bit for bit; a multiply by the reciprocal in the MEAN backward, as the
// unsharded backward scales its gradient by 1 / L.
enum class ColumnsScale { kDivide, kTimesReciprocal };

// Column blocks of two 2-D f32 tensors with the same rows, for b < rows and j < n:
//   dst[b, dst_col + j] = (accumulate ? dst[b, dst_col + j] : 0) + x / s_b        (kDivide)
//                                                                 + x * (1 / s_b)
//                                                                 (kTimesReciprocal)
//   x            src[b, src_col + j]
//   s_b          divisor * row_divisor[b] (f32 [rows] on dst's device), or divisor alone when
//                row_divisor is null; divisor 1 places or adds the block exactly
//   accumulate   false: dst is only written (an uninitialised block is fine)
//   src          may be dst itself when src_col == dst_col (in place); otherwise it must not
//                overlap dst's block
void columns_axpy(Tensor& dst,
                  int64_t dst_col,
                  const Tensor& src,
                  int64_t src_col,
                  int64_t n,
                  float divisor,
                  const Tensor* row_divisor,
                  ColumnsScale scale,
                  bool accumulate,
                  Stream& stream);

// The block of columns_axpy, as raw row-major pointers (the backends' shared signature).
struct ColumnsAxpy {
    int64_t rows = 0, n = 0;
    float* dst = nullptr;  // &dst[0, dst_col]
    int64_t dst_stride = 0;
    const float* src = nullptr;  // &src[0, src_col]
    int64_t src_stride = 0;
    float divisor = 1.0f;
    const float* row_divisor = nullptr;
    bool reciprocal = false;  // ColumnsScale::kTimesReciprocal
    bool accumulate = false;
};

// fill_'s listed rows, as the backends take them.
struct FillRows {
    float* a = nullptr;
    int64_t rows = 0, width = 0;  // a as [rows, width]
    const int64_t* which = nullptr;
    int64_t n = 0;
    float value = 0.f;
};

namespace cpu {
void add_(Tensor& a, const Tensor& b);
void fill_(Tensor& a, float value);
void fill_rows(const FillRows& p);
void columns_axpy(const ColumnsAxpy& p);
}  // namespace cpu

namespace cuda {
void add_(Tensor& a, const Tensor& b, Stream& stream);
void fill_(Tensor& a, float value, Stream& stream);
void fill_rows(const FillRows& p, Stream& stream);
void columns_axpy(const ColumnsAxpy& p, Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
