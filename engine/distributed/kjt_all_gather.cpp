#include "engine/distributed/kjt_all_gather.h"

#include <cstring>

#include "engine/distributed/comm_ops.h"

namespace shardrec {

namespace {

constexpr int64_t kSizes = 3;  // per rank: batch size, ids, payload width

// The gathered buffers [rank][key][b] -> [key][rank][b], each bag's ids and payload moving with it.
void recat(const std::vector<int64_t>& batch_size_per_rank,
           int64_t F,
           int64_t W,
           const int64_t* lengths,
           const int64_t* values,
           const float* payload,
           int64_t* out_offsets,
           int64_t* out_values,
           float* out_payload) {
    const auto world = static_cast<int64_t>(batch_size_per_rank.size());
    int64_t Bg = 0;
    for (int64_t Br : batch_size_per_rank)
        Bg += Br;
    std::vector<int64_t> bag_start(static_cast<size_t>(F * Bg));
    int64_t pos = 0;
    for (int64_t i = 0; i < F * Bg; ++i) {
        bag_start[static_cast<size_t>(i)] = pos;
        pos += lengths[i];
    }
    int64_t n = 0;
    out_offsets[0] = 0;
    for (int64_t f = 0; f < F; ++f) {
        int64_t l0 = 0, b_out = 0;
        for (int64_t r = 0; r < world; ++r) {
            const int64_t Br = batch_size_per_rank[static_cast<size_t>(r)];
            for (int64_t b = 0; b < Br; ++b, ++b_out) {
                const int64_t src = l0 + f * Br + b;
                const int64_t start = bag_start[static_cast<size_t>(src)], len = lengths[src];
                if (len > 0) {
                    std::memcpy(out_values + n, values + start,
                                static_cast<size_t>(len) * sizeof(int64_t));
                }
                if (len > 0 && out_payload != nullptr) {
                    std::memcpy(out_payload + n * W, payload + start * W,
                                static_cast<size_t>(len * W) * sizeof(float));
                }
                n += len;
                out_offsets[f * Bg + b_out + 1] = n;
            }
            l0 += F * Br;
        }
    }
}

}  // namespace

GatheredKJT all_gather_kjt(comm::ProcessGroup& pg,
                           const KeyedJaggedTensor& kjt,
                           const Tensor* payload,
                           KJTAllGatherBuffers& buf) {
    SR_CHECK(!kjt.variable_stride_per_key(),
             "all_gather_kjt: a variable batch per key is not supported");
    const int64_t N_mine = kjt.values().numel();
    const int64_t W_mine = payload == nullptr ? 0 : payload->dim() == 1 ? 1 : payload->size(1);
    if (payload != nullptr) {
        SR_CHECK(payload->dtype() == DType::kF32 && payload->dim() <= 2 &&
                     payload->numel() == N_mine * W_mine,
                 "all_gather_kjt: the payload must be f32 [{}] or [{}, W], got {}", N_mine, N_mine,
                 payload->str());
    }
    const int world = pg.size();
    const int64_t F = kjt.num_keys();
    Tensor mine = grow_prefix(buf.mine, kSizes, DType::kI64);
    mine.data<int64_t>()[0] = kjt.stride();
    mine.data<int64_t>()[1] = N_mine;
    mine.data<int64_t>()[2] = W_mine;
    Tensor sizes = grow_prefix(buf.sizes, kSizes * world, DType::kI64);
    pg.all_gather_v(mine, sizes, std::vector<int64_t>(static_cast<size_t>(world), kSizes)).wait();
    const int64_t* sz = sizes.data<int64_t>();
    GatheredKJT out;
    std::vector<int64_t> len_splits, val_splits, payload_splits;
    int64_t N = 0;
    for (int r = 0; r < world; ++r) {
        // Every rank sees every width, so all of them throw here or none does.
        SR_CHECK(sz[kSizes * r + 2] == sz[2],
                 "all_gather_kjt: rank {} sends a payload of width {}, rank 0 of width {}", r,
                 sz[kSizes * r + 2], sz[2]);
        out.batch_size_per_rank.push_back(sz[kSizes * r]);
        len_splits.push_back(F * sz[kSizes * r]);
        val_splits.push_back(sz[kSizes * r + 1]);
        payload_splits.push_back(sz[kSizes * r + 1] * W_mine);
        out.stride += sz[kSizes * r];
        N += sz[kSizes * r + 1];
    }
    Tensor lengths = grow_prefix(buf.lengths, F * out.stride, DType::kI64);
    Tensor values = grow_prefix(buf.values, N, DType::kI64);
    comm::Work wl = pg.all_gather_v(kjt.lengths(), lengths, len_splits);
    comm::Work wv = pg.all_gather_v(kjt.values(), values, val_splits);
    Tensor gathered_payload;
    comm::Work wp;
    if (payload != nullptr) {
        gathered_payload = grow_prefix(buf.payload, N * W_mine, DType::kF32);
        wp = pg.all_gather_v(payload->view({N_mine * W_mine}), gathered_payload, payload_splits);
    }
    wl.wait();
    wv.wait();
    wp.wait();
    out.offsets = grow_prefix(buf.global_offsets, F * out.stride + 1, DType::kI64);
    out.values = grow_prefix(buf.global_values, N, DType::kI64);
    if (payload != nullptr) {
        out.payload = grow_prefix(buf.global_payload, N * W_mine, DType::kF32);
        if (payload->dim() == 2)
            out.payload = out.payload.view({N, W_mine});
    }
    recat(out.batch_size_per_rank, F, W_mine, lengths.data<int64_t>(), values.data<int64_t>(),
          payload != nullptr ? gathered_payload.data<float>() : nullptr,
          out.offsets.data<int64_t>(), out.values.data<int64_t>(),
          payload != nullptr ? out.payload.data<float>() : nullptr);
    return out;
}

}  // namespace shardrec
