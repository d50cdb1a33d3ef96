// Cache row moves on the host: a payload at a time, the row converted between the table's dtype
// and the cache's precision, the states copied.
#include "kernels/cache_rows.h"

#include <cstring>

namespace shardrec::kernels::cpu {

namespace {

// One value of dtype t at byte p (any alignment) as f32, and back (nearest even).
float load(const char* p, DType t) {
    if (t == DType::kF32) {
        float v;
        std::memcpy(&v, p, 4);
        return v;
    }
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return t == DType::kF16 ? to_float(Half{bits}) : to_float(BFloat16{bits});
}

void store(char* p, DType t, float v) {
    if (t == DType::kF32) {
        std::memcpy(p, &v, 4);
        return;
    }
    const uint16_t bits =
        t == DType::kF16 ? from_float<Half>(v).bits : from_float<BFloat16>(v).bits;
    std::memcpy(p, &bits, 2);
}

// n values of dtype `from` at src as dtype `to` at dst, or a copy.
void convert(const void* src, DType from, void* dst, DType to, int64_t n) {
    if (from == to) {
        std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(from));
        return;
    }
    const auto fs = static_cast<int64_t>(dtype_size(from)),
               ts = static_cast<int64_t>(dtype_size(to));
    for (int64_t i = 0; i < n; ++i)
        store(static_cast<char*>(dst) + i * ts, to,
              load(static_cast<const char*>(src) + i * fs, from));
}

}  // namespace

void cache_rows_pack(const CacheRowsArgs& a) {
    const size_t sw = static_cast<size_t>(a.cols) * dtype_size(a.slot_dtype);
    const size_t rw = static_cast<size_t>(a.cols) * dtype_size(a.row_dtype);
    for (int64_t i = 0; i < a.n; ++i) {
        const int64_t slot = a.slots[i];
        uint8_t* p = a.payloads + i * a.payload_bytes;
        convert(static_cast<const char*>(a.weights) + slot * static_cast<int64_t>(sw), a.slot_dtype,
                p, a.row_dtype, a.cols);
        p += rw;
        if (a.state1_cols > 0) {
            std::memcpy(p, a.state1 + slot * a.state1_cols, static_cast<size_t>(a.state1_cols) * 4);
            p += a.state1_cols * 4;
        }
        if (a.state2_cols > 0)
            std::memcpy(p, a.state2 + slot * a.state2_cols, static_cast<size_t>(a.state2_cols) * 4);
    }
}

void cache_rows_unpack(const CacheRowsArgs& a) {
    const size_t sw = static_cast<size_t>(a.cols) * dtype_size(a.slot_dtype);
    const size_t rw = static_cast<size_t>(a.cols) * dtype_size(a.row_dtype);
    for (int64_t i = 0; i < a.n; ++i) {
        const int64_t slot = a.slots[i];
        const uint8_t* p = a.payloads + i * a.payload_bytes;
        convert(p, a.row_dtype, static_cast<char*>(a.weights) + slot * static_cast<int64_t>(sw),
                a.slot_dtype, a.cols);
        p += rw;
        if (a.state1_cols > 0) {
            std::memcpy(a.state1 + slot * a.state1_cols, p, static_cast<size_t>(a.state1_cols) * 4);
            p += a.state1_cols * 4;
        }
        if (a.state2_cols > 0)
            std::memcpy(a.state2 + slot * a.state2_cols, p, static_cast<size_t>(a.state2_cols) * 4);
    }
}

}  // namespace shardrec::kernels::cpu
