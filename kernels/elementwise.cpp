// Element-wise ops: argument checks (all of them, once) and the device switch.
#include "kernels/elementwise.h"

namespace shardrec::kernels {

void add_(Tensor& a, const Tensor& b, Stream& stream) {
    SR_CHECK(a.defined() && b.defined(), "add_: undefined tensor");
    SR_CHECK(a.dtype() == DType::kF32 && b.dtype() == DType::kF32, "add_: {} += {} must be f32",
             a.str(), b.str());
    SR_CHECK(a.numel() == b.numel(), "add_: {} += {} differ in size", a.str(), b.str());
    SR_CHECK(a.device() == b.device(), "add_: {} += {} are on different devices", a.str(), b.str());
    SR_CHECK(a.data_ptr() != b.data_ptr() || a.numel() == 0, "add_: b aliases a");
    switch (a.device().type) {
        case DeviceType::kCpu:
            return cpu::add_(a, b);
        case DeviceType::kCuda:
            return cuda::add_(a, b, stream);
    }
}

void fill_(Tensor& a, float value, Stream& stream, const Tensor* which) {
    SR_CHECK(a.defined() && a.dtype() == DType::kF32, "fill_: {} must be f32",
             a.defined() ? a.str() : "undefined");
    if (which != nullptr) {
        SR_CHECK(a.dim() >= 1, "fill_: rows of a scalar {}", a.str());
        SR_CHECK(which->defined() && which->dim() == 1 && which->dtype() == DType::kI64 &&
                     which->device() == a.device(),
                 "fill_: which must be an i64 [N] tensor on {}, got {}", a.device().str(),
                 which->defined() ? which->str() : "undefined");
        FillRows p;
        p.a = a.data<float>();
        p.rows = a.size(0);
        p.width = p.rows > 0 ? a.numel() / p.rows : 0;
        p.which = which->data<int64_t>();
        p.n = which->numel();
        p.value = value;
        if (p.n == 0 || p.width == 0)
            return;
        switch (a.device().type) {
            case DeviceType::kCpu:
                for (int64_t i = 0; i < p.n; ++i) {
                    SR_CHECK(p.which[i] >= 0 && p.which[i] < p.rows,
                             "fill_: which[{}] = {} is not a row of {}", i, p.which[i], a.str());
                }
                return cpu::fill_rows(p);
            case DeviceType::kCuda:
                return cuda::fill_rows(p, stream);
        }
    }
    switch (a.device().type) {
        case DeviceType::kCpu:
            return cpu::fill_(a, value);
        case DeviceType::kCuda:
            return cuda::fill_(a, value, stream);
    }
}

void columns_axpy(Tensor& dst,
                  int64_t dst_col,
                  const Tensor& src,
                  int64_t src_col,
                  int64_t n,
                  float divisor,
                  const Tensor* row_divisor,
                  ColumnsScale scale,
                  bool accumulate,
                  Stream& stream) {
    SR_CHECK(dst.defined() && src.defined() && dst.dtype() == DType::kF32 &&
                 src.dtype() == DType::kF32 && dst.dim() == 2 && src.dim() == 2 &&
                 dst.size(0) == src.size(0),
             "columns_axpy: {} from {} must be 2-D f32 with the same rows",
             dst.defined() ? dst.str() : "undefined", src.defined() ? src.str() : "undefined");
    SR_CHECK(n >= 0 && dst_col >= 0 && src_col >= 0 && dst_col + n <= dst.size(1) &&
                 src_col + n <= src.size(1),
             "columns_axpy: columns [{}, +{}) of {} from [{}, +{}) of {}", dst_col, n, dst.str(),
             src_col, n, src.str());
    SR_CHECK(dst.device() == src.device(), "columns_axpy: {} and {} are on different devices",
             dst.str(), src.str());
    if (row_divisor != nullptr) {
        SR_CHECK(row_divisor->dtype() == DType::kF32 && row_divisor->numel() == dst.size(0) &&
                     row_divisor->device() == dst.device(),
                 "columns_axpy: row_divisor {} for {} rows on {}", row_divisor->str(), dst.size(0),
                 dst.device().str());
    }
    ColumnsAxpy p;
    p.rows = dst.size(0);
    p.n = n;
    p.dst = dst.data<float>() + dst_col;
    p.dst_stride = dst.size(1);
    p.src = src.data<float>() + src_col;
    p.src_stride = src.size(1);
    p.divisor = divisor;
    p.row_divisor = row_divisor != nullptr ? row_divisor->data<float>() : nullptr;
    p.reciprocal = scale == ColumnsScale::kTimesReciprocal;
    p.accumulate = accumulate;
    if (p.rows > 0 && n > 0) {
        const bool same_tensor = dst.data_ptr() == src.data_ptr() && p.src_stride == p.dst_stride;
        const bool disjoint =
            same_tensor ? src_col == dst_col || src_col + n <= dst_col || dst_col + n <= src_col
                        : p.dst + (p.rows - 1) * p.dst_stride + n <= p.src ||
                              p.src + (p.rows - 1) * p.src_stride + n <= p.dst;
        SR_CHECK(disjoint, "columns_axpy: columns [{}, +{}) of {} overlap [{}, +{}) of {}", src_col,
                 n, src.str(), dst_col, n, dst.str());
    }
    if (p.rows == 0 || n == 0)
        return;
    switch (dst.device().type) {
        case DeviceType::kCpu:
            return cpu::columns_axpy(p);
        case DeviceType::kCuda:
            return cuda::columns_axpy(p, stream);
    }
}

}  // namespace shardrec::kernels
