// Element-wise tensor arithmetic the models need between their modules (torch's in-place add_):
// DeepFM sums the gradients that reach one input through two branches; the sharded collections'
// output dists add row shards, divide MEAN bags after the sum and divide gradients by the world
// size on column blocks (columns_axpy), on whichever device their tensors live.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

//   a   any shape, f32, updated in place: a += b
//   b   the same numel, f32, on a's device (it may not alias a)
void add_(Tensor& a, const Tensor& b, Stream& stream);

// Column blocks of two 2-D f32 tensors with the same rows, for b < rows and j < n:
//   dst[b, dst_col + j] = (accumulate ? dst[b, dst_col + j] : 0) + alpha * s_b * src[b, src_col +
//   j] s_b         row_scale[b] (f32 [rows] on dst's device), or 1 when row_scale is null
//   accumulate  false: dst is only written (an uninitialised block is fine)
//   src         may be dst itself when src_col == dst_col (in place); otherwise it must not overlap
//               dst's block
void columns_axpy(Tensor& dst,
                  int64_t dst_col,
                  const Tensor& src,
                  int64_t src_col,
                  int64_t n,
                  float alpha,
                  const Tensor* row_scale,
                  bool accumulate,
                  Stream& stream);

// The block of columns_axpy, as raw row-major pointers (the backends' shared signature).
struct ColumnsAxpy {
    int64_t rows = 0, n = 0;
    float* dst = nullptr;  // &dst[0, dst_col]
    int64_t dst_stride = 0;
    const float* src = nullptr;  // &src[0, src_col]
    int64_t src_stride = 0;
    float alpha = 1.0f;
    const float* row_scale = nullptr;
    bool accumulate = false;
};

namespace cpu {
void add_(Tensor& a, const Tensor& b);
void columns_axpy(const ColumnsAxpy& p);
}  // namespace cpu

namespace cuda {
void add_(Tensor& a, const Tensor& b, Stream& stream);
void columns_axpy(const ColumnsAxpy& p, Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
