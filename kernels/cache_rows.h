// Rows moving between a cache's slots and the payloads of the slower tier behind it (the key_value
// and fused_uvm_caching kernels, engine/modules/cached_embedding_shard.h). A payload is one row as
// its table stores it: `cols` values of the table's dtype, then its optimizer state as f32 (state1
// of one value per row or of `cols`, state2 of `cols`), packed without padding. A slot holds the
// row in the cache's precision, the weights tensor's dtype: a row entering the cache is rounded
// to it (nearest even), a row leaving is widened back (exact). States move bit for bit.
#pragma once

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace shardrec::kernels {

// Bytes of one payload: cols values of row_dtype and the states' f32 values per row.
int64_t cache_payload_bytes(int64_t cols,
                            DType row_dtype,
                            int64_t state1_cols,
                            int64_t state2_cols);

// payloads (u8, at least n payloads) <- the rows at `slots` ([n] i64, in [0, weights.size(0)))
// of weights [capacity, cols] and the states (state1 [capacity] or [capacity, cols], state2
// [capacity, cols], or null), as row_dtype rows. Every tensor on one device, in stream's order.
void cache_rows_pack(const Tensor& weights,
                     const Tensor* state1,
                     const Tensor* state2,
                     const Tensor& slots,
                     DType row_dtype,
                     Tensor& payloads,
                     Stream& stream);

// The inverse: the n payloads into the rows at `slots` (distinct).
void cache_rows_unpack(const Tensor& payloads,
                       const Tensor& slots,
                       DType row_dtype,
                       Tensor& weights,
                       Tensor* state1,
                       Tensor* state2,
                       Stream& stream);

// What the dispatch hands a backend: the cache's tensors as pointers and widths.
struct CacheRowsArgs {
    void* weights = nullptr;
    DType slot_dtype = DType::kF32;
    DType row_dtype = DType::kF32;
    int64_t cols = 0;
    float* state1 = nullptr;
    int64_t state1_cols = 0;  // 0, 1 or cols
    float* state2 = nullptr;
    int64_t state2_cols = 0;  // 0 or cols
    const int64_t* slots = nullptr;
    int64_t n = 0;
    uint8_t* payloads = nullptr;
    int64_t payload_bytes = 0;
};

namespace cpu {
void cache_rows_pack(const CacheRowsArgs& a);
void cache_rows_unpack(const CacheRowsArgs& a);
}  // namespace cpu

namespace cuda {
void cache_rows_pack(const CacheRowsArgs& a, Stream& stream);
void cache_rows_unpack(const CacheRowsArgs& a, Stream& stream);
}  // namespace cuda

}  // namespace shardrec::kernels
