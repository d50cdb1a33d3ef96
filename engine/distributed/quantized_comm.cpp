#include "engine/distributed/quantized_comm.h"

#include <numeric>

#include "engine/distributed/comm_ops.h"
#include "kernels/elementwise.h"

namespace shardrec {
namespace {

using kernels::CommType;

int64_t sum_of(const std::vector<int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), int64_t{0});
}

std::vector<int64_t> times(const std::vector<int64_t>& v, int64_t factor) {
    std::vector<int64_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i)
        out[i] = v[i] * factor;
    return out;
}

void check_rows(const Tensor& t, int64_t rows, const char* what) {
    SR_CHECK(t.defined() && t.dtype() == DType::kF32 && t.dim() == 2 && t.size(0) == rows,
             "{}: needs f32 [{}, cols], got {}", what, rows, t.defined() ? t.str() : "undefined");
}

}  // namespace

Tensor reuse_byte_buffer(Tensor& buf, int64_t bytes, Device device) {
    return reuse_buffer(buf, 1, bytes, DType::kU8, device).view({bytes});
}

QuantizedCollective quantized_reduce_scatter(comm::ProcessGroup& pg,
                                             const Tensor& input,
                                             const std::vector<int64_t>& rows_per_rank,
                                             CommType type,
                                             Tensor out,
                                             QuantizedBuffers& buffers,
                                             Stream& stream) {
    const int64_t world = pg.size(), me = pg.rank();
    SR_CHECK(static_cast<int64_t>(rows_per_rank.size()) == world,
             "quantized_reduce_scatter: {} row counts for {} ranks", rows_per_rank.size(), world);
    check_rows(input, sum_of(rows_per_rank), "quantized_reduce_scatter input");
    const int64_t cols = input.size(1), my_rows = rows_per_rank[static_cast<size_t>(me)];
    check_rows(out, my_rows, "quantized_reduce_scatter out");
    const int64_t row_bytes = kernels::qcomm_row_bytes(type, cols);
    const Device device = input.device();
    Tensor send = reuse_byte_buffer(buffers.send, input.size(0) * row_bytes, device);
    Tensor recv = reuse_byte_buffer(buffers.recv, world * my_rows * row_bytes, device);
    Tensor decoded = reuse_buffer(buffers.decoded, my_rows, cols, DType::kF32, device);
    kernels::qcomm_encode(input, type, send, stream);
    stream.synchronize();  // the collective reads send
    QuantizedCollective c;
    const std::vector<int64_t> send_splits = times(rows_per_rank, row_bytes);
    c.bytes_sent = send.numel() - send_splits[static_cast<size_t>(me)];
    c.work = pg.all_to_all_v(send, send_splits, recv,
                             std::vector<int64_t>(static_cast<size_t>(world), my_rows * row_bytes));
    // Block s of recv is rank s's encoded part for me; the sum runs in rank order.
    c.finish = [recv, decoded, out, world, my_rows, row_bytes, type, s = &stream]() mutable {
        const int64_t block = my_rows * row_bytes;
        for (int64_t r = 0; r < world; ++r) {
            Tensor bytes = recv.slice(r * block, (r + 1) * block);
            if (r == 0) {
                kernels::qcomm_decode(bytes, type, out, *s);
            } else {
                kernels::qcomm_decode(bytes, type, decoded, *s);
                kernels::add_(out, decoded, *s);
            }
        }
        s->synchronize();
    };
    return c;
}

QuantizedCollective quantized_all_gather(comm::ProcessGroup& pg,
                                         const Tensor& input,
                                         const std::vector<int64_t>& rows_per_rank,
                                         CommType type,
                                         Tensor out,
                                         QuantizedBuffers& buffers,
                                         Stream& stream) {
    const int64_t world = pg.size(), me = pg.rank();
    SR_CHECK(static_cast<int64_t>(rows_per_rank.size()) == world,
             "quantized_all_gather: {} row counts for {} ranks", rows_per_rank.size(), world);
    check_rows(input, rows_per_rank[static_cast<size_t>(me)], "quantized_all_gather input");
    const int64_t cols = input.size(1);
    check_rows(out, sum_of(rows_per_rank), "quantized_all_gather out");
    const int64_t row_bytes = kernels::qcomm_row_bytes(type, cols);
    const Device device = input.device();
    Tensor send = reuse_byte_buffer(buffers.send, input.size(0) * row_bytes, device);
    Tensor recv = reuse_byte_buffer(buffers.recv, out.size(0) * row_bytes, device);
    kernels::qcomm_encode(input, type, send, stream);
    stream.synchronize();
    QuantizedCollective c;
    c.bytes_sent = send.numel() * (world - 1);
    c.work = pg.all_gather_v(send, recv, times(rows_per_rank, row_bytes));
    c.finish = [recv, out, type, s = &stream]() mutable {
        kernels::qcomm_decode(recv, type, out, *s);
        s->synchronize();
    };
    return c;
}

void quantized_all_reduce_mean(comm::ProcessGroup& pg,
                               Tensor& flat,
                               CommType type,
                               QuantizedBuffers& buffers,
                               Stream& stream) {
    SR_CHECK(flat.defined() && flat.dtype() == DType::kF32 && flat.dim() == 1,
             "quantized_all_reduce_mean: needs a 1-D f32 tensor, got {}",
             flat.defined() ? flat.str() : "undefined");
    const int64_t world = pg.size(), n = flat.numel();
    // Chunk r of the values is rank r's to sum: n / world each, the first n % world one more.
    std::vector<int64_t> chunk(static_cast<size_t>(world), n / world);
    for (int64_t r = 0; r < n % world; ++r)
        ++chunk[static_cast<size_t>(r)];
    const int64_t mine = chunk[static_cast<size_t>(pg.rank())];
    // One value per row: the fp8 scale would cost 4 bytes per value, so the dense all-reduce
    // offers fp16 and bf16 only (config: comm.allreduce_precision).
    SR_CHECK(type != CommType::kFp8, "quantized_all_reduce_mean: fp8 is not offered here");
    Tensor sum = reuse_buffer(buffers.mean, mine, 1, DType::kF32, flat.device());
    QuantizedCollective rs =
        quantized_reduce_scatter(pg, flat.view({n, 1}), chunk, type, sum, buffers, stream);
    rs.work.wait();
    rs.finish();
    divide_by_world(sum, world, stream);
    QuantizedCollective ag =
        quantized_all_gather(pg, sum, chunk, type, flat.view({n, 1}), buffers, stream);
    ag.work.wait();
    ag.finish();
}

}  // namespace shardrec
