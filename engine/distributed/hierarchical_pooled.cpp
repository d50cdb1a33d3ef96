#include "engine/distributed/hierarchical_pooled.h"

#include <map>
#include <numeric>
#include <utility>

#include "comm/mpi_env.h"
#include "kernels/elementwise.h"

namespace shardrec {

using pooled::rows_per_rank;
using pooled::scaled;
using pooled::sum_of;

namespace {

constexpr kernels::CommType kFp32 = kernels::CommType::kFp32;
constexpr int64_t kF32Bytes = sizeof(float);

void check_embeddings(const Tensor& t, const char* what) {
    SR_CHECK(t.defined() && t.dtype() == DType::kF32 && t.dim() == 2,
             "{}: needs an f32 [rows, cols] tensor, got {}", what,
             t.defined() ? t.str() : "undefined");
}

Stream& copy_stream(std::unique_ptr<Stream>& own, Device device) {
    if (device.is_cpu())
        return Stream::cpu();
    if (own == nullptr || own->device() != device)
        own = std::make_unique<Stream>(device);
    return *own;
}

// Byte counts of f32 blocks back to elements.
std::vector<int64_t> divided(const std::vector<int64_t>& v, int64_t d) {
    std::vector<int64_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i)
        out[i] = v[i] / d;
    return out;
}

std::vector<int64_t> prefix(const std::vector<int64_t>& v) {
    std::vector<int64_t> out(v.size() + 1, 0);
    for (size_t i = 0; i < v.size(); ++i)
        out[i + 1] = out[i] + v[i];
    return out;
}

// The [rows, cols] block at element `at` of a contiguous f32 tensor, as a view.
Tensor block_view(const Tensor& t, int64_t at, int64_t rows, int64_t cols) {
    return t.view({t.numel()}).slice(at, at + rows * cols).view({rows, cols});
}

// Rows [src_row, + rows) of src -> rows [dst_row, + rows) of dst (both [*, cols] contiguous).
void copy_rows(Tensor& dst,
               int64_t dst_row,
               const Tensor& src,
               int64_t src_row,
               int64_t rows,
               Stream& stream) {
    const int64_t cols = src.size(1);
    if (rows == 0 || cols == 0)
        return;
    copy_async(dst.data<float>() + dst_row * cols, dst.device(), src.data<float>() + src_row * cols,
               src.device(), static_cast<size_t>(rows * cols) * sizeof(float), stream);
}

// dst[:, dst_col + j] = (accumulate ? dst : 0) + src[:, src_col + j] exactly.
void put_columns(Tensor& dst,
                 int64_t dst_col,
                 const Tensor& src,
                 int64_t src_col,
                 int64_t n,
                 bool accumulate,
                 Stream& stream) {
    if (n == 0 || dst.size(0) == 0)
        return;
    kernels::columns_axpy(dst, dst_col, src, src_col, n, 1.0f, nullptr,
                          kernels::ColumnsScale::kDivide, accumulate, stream);
}

}  // namespace

HierarchicalMode hierarchical_mode_from_name(const std::string& name) {
    if (name == "auto")
        return HierarchicalMode::kAuto;
    if (name == "true")
        return HierarchicalMode::kOn;
    SR_CHECK(name == "false", "comm.hierarchical: '{}' is not one of auto, true, false", name);
    return HierarchicalMode::kOff;
}

int64_t cross_node_bytes(const std::vector<int64_t>& bytes_to_rank, int me, int local_size) {
    int64_t total = 0;
    for (size_t r = 0; r < bytes_to_rank.size(); ++r) {
        if (static_cast<int>(r) / local_size != me / local_size)
            total += bytes_to_rank[r];
    }
    return total;
}

bool use_hierarchical(HierarchicalMode mode, int world, int local_size, bool rows_split_in_node) {
    if (mode != HierarchicalMode::kAuto)
        return mode == HierarchicalMode::kOn;
    return local_size > 1 && world > local_size && rows_split_in_node;
}

int node_local_size(const comm::ProcessGroup& pg) {
    const comm::ProcessInfo& info = comm::process_info();
    if (pg.size() == info.world_size && info.local_size > 0 && pg.size() % info.local_size == 0)
        return info.local_size;
    return pg.size();
}

NodeGroups make_node_groups(comm::ProcessGroup& pg, int local_size) {
    comm::IntraAndCrossNodeGroups groups = comm::intra_and_cross_node_pg(pg, local_size);
    NodeGroups g;
    g.intra = std::move(groups.intra);
    g.cross = std::move(groups.cross);
    g.local_size = local_size;
    g.nodes = pg.size() / local_size;
    return g;
}

// ---- HierarchicalReduceScatter ----

HierarchicalReduceScatter::HierarchicalReduceScatter(NodeGroups groups, QCommsConfig qcomms)
    : g_(std::move(groups)), qcomms_(qcomms) {
    SR_CHECK(g_.intra != nullptr && g_.cross != nullptr,
             "HierarchicalReduceScatter: null node groups");
    world_ = g_.local_size * g_.nodes;
    me_ = g_.cross->rank() * g_.local_size + g_.intra->rank();
}

TensorAwaitable HierarchicalReduceScatter::start_forward(const Tensor& local_embs,
                                                         const std::vector<int64_t>& input_splits) {
    check_embeddings(local_embs, "HierarchicalReduceScatter::forward");
    const int L = g_.local_size, N = g_.nodes, l = me_ % L;
    input_splits_ = rows_per_rank(input_splits, local_embs.size(0), world_,
                                  "HierarchicalReduceScatter::forward");
    dim_ = local_embs.size(1);
    const Device device = local_embs.device();
    Stream& stream = copy_stream(stream_, device);
    const std::vector<int64_t> off = prefix(input_splits_);
    // Blocks reordered by (local rank, node): local rank j gets the blocks of every node's rank j.
    Tensor send = reuse_buffer(send_, local_embs.size(0), dim_, DType::kF32, device);
    std::vector<int64_t> intra_rows(static_cast<size_t>(L), 0), cross_rows(static_cast<size_t>(N));
    int64_t at = 0;
    for (int j = 0; j < L; ++j) {
        for (int m = 0; m < N; ++m) {
            const size_t r = static_cast<size_t>(m * L + j);
            copy_rows(send, at, local_embs, off[r], input_splits_[r], stream);
            at += input_splits_[r];
            intra_rows[static_cast<size_t>(j)] += input_splits_[r];
        }
    }
    for (int m = 0; m < N; ++m)
        cross_rows[static_cast<size_t>(m)] = input_splits_[static_cast<size_t>(m * L + l)];
    stream.synchronize();  // the collective reads send
    Tensor mid = reuse_buffer(mid_, intra_rows[static_cast<size_t>(l)], dim_, DType::kF32, device);
    g_.intra->reduce_scatter_v(send, scaled(intra_rows, dim_), mid, comm::ReduceOp::kSum).wait();
    sent_bytes_.forward += (local_embs.size(0) - mid.size(0)) * dim_ * kF32Bytes;
    Tensor out =
        reuse_buffer(out_, input_splits_[static_cast<size_t>(me_)], dim_, DType::kF32, device);
    std::vector<comm::Work> works;
    const kernels::CommType q = qcomms_.forward_precision;
    if (q == kFp32) {
        works.push_back(
            g_.cross->reduce_scatter_v(mid, scaled(cross_rows, dim_), out, comm::ReduceOp::kSum));
        const int64_t bytes = (mid.size(0) - out.size(0)) * dim_ * kF32Bytes;
        sent_bytes_.forward += bytes;
        sent_bytes_.forward_cross_node += bytes;
        return TensorAwaitable(std::move(works), [mid, out]() { return out; });
    }
    QuantizedCollective c =
        quantized_reduce_scatter(*g_.cross, mid, cross_rows, q, out, forward_q_, stream);
    sent_bytes_.forward += c.bytes_sent;
    sent_bytes_.forward_cross_node += c.bytes_sent;
    works.push_back(std::move(c.work));
    return TensorAwaitable(std::move(works), [mid, out, finish = std::move(c.finish)]() {
        finish();
        return out;
    });
}

Tensor HierarchicalReduceScatter::forward(const Tensor& local_embs,
                                          const std::vector<int64_t>& input_splits) {
    return start_forward(local_embs, input_splits).wait();
}

TensorAwaitable HierarchicalReduceScatter::start_backward(const Tensor& grad_output) {
    check_embeddings(grad_output, "HierarchicalReduceScatter::backward");
    SR_CHECK(!input_splits_.empty(), "HierarchicalReduceScatter::backward before forward");
    SR_CHECK(grad_output.size(0) == input_splits_[static_cast<size_t>(me_)] &&
                 grad_output.size(1) == dim_,
             "HierarchicalReduceScatter::backward: grad_output {} for [{}, {}]", grad_output.str(),
             input_splits_[static_cast<size_t>(me_)], dim_);
    const int L = g_.local_size, N = g_.nodes, l = me_ % L;
    const Device device = grad_output.device();
    Stream& stream = copy_stream(stream_, device);
    std::vector<int64_t> intra_rows(static_cast<size_t>(L), 0), cross_rows(static_cast<size_t>(N));
    for (int m = 0; m < N; ++m) {
        for (int j = 0; j < L; ++j)
            intra_rows[static_cast<size_t>(j)] += input_splits_[static_cast<size_t>(m * L + j)];
        cross_rows[static_cast<size_t>(m)] = input_splits_[static_cast<size_t>(m * L + l)];
    }
    // Across nodes first: my gradient rows to my peers (same local rank) on every node.
    Tensor mid =
        reuse_buffer(grad_mid_, intra_rows[static_cast<size_t>(l)], dim_, DType::kF32, device);
    const kernels::CommType q = qcomms_.backward_precision;
    if (q == kFp32) {
        g_.cross->all_gather_v(grad_output, mid, scaled(cross_rows, dim_)).wait();
        const int64_t bytes = grad_output.numel() * kF32Bytes * (N - 1);
        sent_bytes_.backward += bytes;
        sent_bytes_.backward_cross_node += bytes;
    } else {
        QuantizedCollective c =
            quantized_all_gather(*g_.cross, grad_output, cross_rows, q, mid, backward_q_, stream);
        c.work.wait();
        c.finish();
        sent_bytes_.backward += c.bytes_sent;
        sent_bytes_.backward_cross_node += c.bytes_sent;
    }
    // Then inside the node: blocks arrive in (local rank, node) order.
    const int64_t total = sum_of(input_splits_);
    Tensor gathered = reuse_buffer(grad_gathered_, total, dim_, DType::kF32, device);
    std::vector<comm::Work> works;
    works.push_back(g_.intra->all_gather_v(mid, gathered, scaled(intra_rows, dim_)));
    sent_bytes_.backward += mid.numel() * kF32Bytes * (L - 1);
    Tensor grad_in = reuse_buffer(grad_in_, total, dim_, DType::kF32, device);
    auto finish = [mid, gathered, grad_in, splits = input_splits_, L, N, world = world_,
                   s = &stream, divide = gradient_division()]() mutable {
        const std::vector<int64_t> off = prefix(splits);
        int64_t at = 0;
        for (int j = 0; j < L; ++j) {
            for (int m = 0; m < N; ++m) {
                const size_t r = static_cast<size_t>(m * L + j);
                copy_rows(grad_in, off[r], gathered, at, splits[r], *s);
                at += splits[r];
            }
        }
        if (divide)
            divide_by_world(grad_in, world, *s);
        s->synchronize();
        return grad_in;
    };
    return TensorAwaitable(std::move(works), std::move(finish));
}

Tensor HierarchicalReduceScatter::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

// ---- HierarchicalPooledAllToAll ----

HierarchicalPooledAllToAll::HierarchicalPooledAllToAll(
    NodeGroups groups,
    std::vector<std::vector<PooledSegment>> segments_per_rank,
    QCommsConfig qcomms)
    : g_(std::move(groups)), qcomms_(qcomms) {
    SR_CHECK(g_.intra != nullptr && g_.cross != nullptr,
             "HierarchicalPooledAllToAll: null node groups");
    const int L = g_.local_size;
    world_ = L * g_.nodes;
    me_ = g_.cross->rank() * L + g_.intra->rank();
    SR_CHECK(static_cast<int>(segments_per_rank.size()) == world_,
             "HierarchicalPooledAllToAll: segments for {} ranks in a group of {}",
             segments_per_rank.size(), world_);
    for (const auto& segs : segments_per_rank) {
        int64_t d = 0;
        for (const PooledSegment& s : segs)
            d += s.cols;
        dim_sum_per_rank_.push_back(d);
    }
    dim_offsets_ = prefix(dim_sum_per_rank_);
    slots_.resize(static_cast<size_t>(g_.nodes));
    node_cols_.assign(static_cast<size_t>(g_.nodes), 0);
    for (int n = 0; n < g_.nodes; ++n) {
        std::map<int64_t, size_t> tie_slot;
        auto& slots = slots_[static_cast<size_t>(n)];
        for (int r = n * L; r < (n + 1) * L; ++r) {
            int64_t col = 0;
            for (const PooledSegment& s : segments_per_rank[static_cast<size_t>(r)]) {
                const auto it = s.tie >= 0 ? tie_slot.find(s.tie) : tie_slot.end();
                if (it != tie_slot.end()) {
                    Slot& slot = slots[it->second];
                    SR_CHECK(slot.cols == s.cols,
                             "HierarchicalPooledAllToAll: tie {} has segments of {} and {} "
                             "columns (rank {})",
                             s.tie, slot.cols, s.cols, r);
                    slot.members.emplace_back(r, col);
                } else {
                    if (s.tie >= 0)
                        tie_slot[s.tie] = slots.size();
                    slots.push_back(
                        {s.cols, {{r, col}}, dim_offsets_[static_cast<size_t>(r)] + col});
                    node_cols_[static_cast<size_t>(n)] += s.cols;
                }
                col += s.cols;
            }
        }
    }
}

TensorAwaitable HierarchicalPooledAllToAll::start_forward(
    const Tensor& local_embs, const std::vector<int64_t>& batch_size_per_rank) {
    check_embeddings(local_embs, "HierarchicalPooledAllToAll::forward");
    const int L = g_.local_size, N = g_.nodes, n = me_ / L, l = me_ % L;
    const int64_t d_me = dim_sum_per_rank_[static_cast<size_t>(me_)];
    SR_CHECK(local_embs.size(1) == d_me,
             "HierarchicalPooledAllToAll::forward: local_embs {} but rank {} owns {} columns",
             local_embs.str(), me_, d_me);
    batch_size_per_rank_ = rows_per_rank(batch_size_per_rank, local_embs.size(0), world_,
                                         "HierarchicalPooledAllToAll::forward");
    const std::vector<int64_t>& B = batch_size_per_rank_;
    const std::vector<int64_t> off = prefix(B);
    const Device device = local_embs.device();
    Stream* stream = &copy_stream(stream_, device);
    // 1. Inside the node: local rank j gets my rows for the samples of every node's rank j.
    Tensor send = reuse_buffer(send_, local_embs.size(0), d_me, DType::kF32, device);
    std::vector<int64_t> send_splits(static_cast<size_t>(L), 0),
        recv_splits(static_cast<size_t>(L));
    int64_t at = 0;
    for (int j = 0; j < L; ++j) {
        for (int m = 0; m < N; ++m) {
            const size_t r = static_cast<size_t>(m * L + j);
            copy_rows(send, at, local_embs, off[r], B[r], *stream);
            at += B[r];
            send_splits[static_cast<size_t>(j)] += B[r] * d_me;
        }
    }
    int64_t rows = 0;  // the samples of every node's rank l
    for (int m = 0; m < N; ++m)
        rows += B[static_cast<size_t>(m * L + l)];
    for (int j = 0; j < L; ++j)
        recv_splits[static_cast<size_t>(j)] =
            rows * dim_sum_per_rank_[static_cast<size_t>(n * L + j)];
    Tensor recv = reuse_buffer(recv_, 1, sum_of(recv_splits), DType::kF32, device);
    stream->synchronize();  // the collective reads send
    g_.intra->all_to_all_v(send, send_splits, recv, recv_splits).wait();
    sent_bytes_.forward += (sum_of(send_splits) - send_splits[static_cast<size_t>(l)]) * kF32Bytes;
    // 2. The node's partial sums added: one column block per slot, from zero in member order.
    const int64_t node_cols = node_cols_[static_cast<size_t>(n)];
    Tensor cross_send = reuse_buffer(cross_send_, rows, node_cols, DType::kF32, device);
    const std::vector<int64_t> recv_off = prefix(recv_splits);
    int64_t sc = 0;
    for (const Slot& slot : slots_[static_cast<size_t>(n)]) {
        for (size_t i = 0; i < slot.members.size(); ++i) {
            const auto [r, col] = slot.members[i];
            const size_t j = static_cast<size_t>(r - n * L);
            const Tensor block =
                block_view(recv, recv_off[j], rows, dim_sum_per_rank_[static_cast<size_t>(r)]);
            put_columns(cross_send, sc, block, col, slot.cols, /*accumulate=*/i > 0, *stream);
        }
        sc += slot.cols;
    }
    stream->synchronize();
    // 3. Across nodes: node m's rank l gets the sums for its samples.
    std::vector<int64_t> cs(static_cast<size_t>(N)), cr(static_cast<size_t>(N));
    const kernels::CommType q = qcomms_.forward_precision;
    const int64_t my_batch = B[static_cast<size_t>(me_)];
    auto row_bytes = [q](int64_t cols) {
        return q == kFp32 ? cols * kF32Bytes : kernels::qcomm_row_bytes(q, cols);
    };
    for (int m = 0; m < N; ++m) {
        cs[static_cast<size_t>(m)] = B[static_cast<size_t>(m * L + l)] * row_bytes(node_cols);
        cr[static_cast<size_t>(m)] = my_batch * row_bytes(node_cols_[static_cast<size_t>(m)]);
    }
    const int64_t cross = sum_of(cs) - cs[static_cast<size_t>(n)];
    sent_bytes_.forward += cross;
    sent_bytes_.forward_cross_node += cross;
    Tensor cross_recv =
        reuse_buffer(cross_recv_, 1, my_batch * sum_of(node_cols_), DType::kF32, device);
    std::vector<comm::Work> works;
    std::function<void()> decode;
    if (q == kFp32) {
        works.push_back(g_.cross->all_to_all_v(cross_send, divided(cs, kF32Bytes), cross_recv,
                                               divided(cr, kF32Bytes)));
    } else {
        Tensor bytes = reuse_byte_buffer(forward_q_.send, sum_of(cs), device);
        kernels::qcomm_encode(cross_send, q, bytes, *stream);
        stream->synchronize();
        Tensor recv_bytes = reuse_byte_buffer(forward_q_.recv, sum_of(cr), device);
        works.push_back(g_.cross->all_to_all_v(bytes, cs, recv_bytes, cr));
        decode = [recv_bytes, cross_recv, cr, my_batch, q, stream, cols = node_cols_]() {
            int64_t at_b = 0, at_f = 0;
            for (size_t m = 0; m < cols.size(); ++m) {
                Tensor block = block_view(cross_recv, at_f, my_batch, cols[m]);
                kernels::qcomm_decode(recv_bytes.slice(at_b, at_b + cr[m]), q, block, *stream);
                at_b += cr[m];
                at_f += my_batch * cols[m];
            }
        };
    }
    // 4. Each slot's sum into its first member's columns of the flat layout, zeros elsewhere.
    Tensor out = reuse_buffer(out_, my_batch, dim_offsets_.back(), DType::kF32, device);
    auto finish = [cross_send, cross_recv, out, my_batch, stream, decode, slots = &slots_,
                   cols = node_cols_]() mutable {
        if (decode)
            decode();
        out.zero_(*stream);
        int64_t at_f = 0;
        for (size_t m = 0; m < cols.size(); ++m) {
            const Tensor block = block_view(cross_recv, at_f, my_batch, cols[m]);
            int64_t c = 0;
            for (const Slot& slot : (*slots)[m]) {
                put_columns(out, slot.out_col, block, c, slot.cols, false, *stream);
                c += slot.cols;
            }
            at_f += my_batch * cols[m];
        }
        stream->synchronize();
        return out;
    };
    return TensorAwaitable(std::move(works), std::move(finish));
}

Tensor HierarchicalPooledAllToAll::forward(const Tensor& local_embs,
                                           const std::vector<int64_t>& batch_size_per_rank) {
    return start_forward(local_embs, batch_size_per_rank).wait();
}

TensorAwaitable HierarchicalPooledAllToAll::start_backward(const Tensor& grad_output) {
    check_embeddings(grad_output, "HierarchicalPooledAllToAll::backward");
    SR_CHECK(!batch_size_per_rank_.empty(), "HierarchicalPooledAllToAll::backward before forward");
    const int L = g_.local_size, N = g_.nodes, n = me_ / L, l = me_ % L;
    const std::vector<int64_t>& B = batch_size_per_rank_;
    const int64_t my_batch = B[static_cast<size_t>(me_)];
    SR_CHECK(grad_output.size(0) == my_batch && grad_output.size(1) == dim_offsets_.back(),
             "HierarchicalPooledAllToAll::backward: grad_output {} for batch {} x {} columns",
             grad_output.str(), my_batch, dim_offsets_.back());
    const Device device = grad_output.device();
    Stream* stream = &copy_stream(stream_, device);
    // 1. Across nodes: node m's slots' gradients (their first members' columns) to its rank l.
    const int64_t all_cols = sum_of(node_cols_);
    Tensor send = reuse_buffer(grad_send_, 1, my_batch * all_cols, DType::kF32, device);
    int64_t at_f = 0;
    for (int m = 0; m < N; ++m) {
        Tensor block = block_view(send, at_f, my_batch, node_cols_[static_cast<size_t>(m)]);
        int64_t c = 0;
        for (const Slot& slot : slots_[static_cast<size_t>(m)]) {
            put_columns(block, c, grad_output, slot.out_col, slot.cols, false, *stream);
            c += slot.cols;
        }
        at_f += my_batch * node_cols_[static_cast<size_t>(m)];
    }
    int64_t rows = 0;
    for (int m = 0; m < N; ++m)
        rows += B[static_cast<size_t>(m * L + l)];
    const int64_t node_cols = node_cols_[static_cast<size_t>(n)];
    Tensor recv = reuse_buffer(grad_recv_, rows, node_cols, DType::kF32, device);
    const kernels::CommType q = qcomms_.backward_precision;
    auto row_bytes = [q](int64_t cols) {
        return q == kFp32 ? cols * kF32Bytes : kernels::qcomm_row_bytes(q, cols);
    };
    std::vector<int64_t> cs(static_cast<size_t>(N)), cr(static_cast<size_t>(N));
    for (int m = 0; m < N; ++m) {
        cs[static_cast<size_t>(m)] = my_batch * row_bytes(node_cols_[static_cast<size_t>(m)]);
        cr[static_cast<size_t>(m)] = B[static_cast<size_t>(m * L + l)] * row_bytes(node_cols);
    }
    const int64_t cross = sum_of(cs) - cs[static_cast<size_t>(n)];
    sent_bytes_.backward += cross;
    sent_bytes_.backward_cross_node += cross;
    if (q == kFp32) {
        stream->synchronize();
        g_.cross->all_to_all_v(send, divided(cs, kF32Bytes), recv, divided(cr, kF32Bytes)).wait();
    } else {
        Tensor bytes = reuse_byte_buffer(backward_q_.send, sum_of(cs), device);
        int64_t at_b = 0;
        at_f = 0;
        for (int m = 0; m < N; ++m) {
            const int64_t c = node_cols_[static_cast<size_t>(m)];
            Tensor out = bytes.slice(at_b, at_b + cs[static_cast<size_t>(m)]);
            kernels::qcomm_encode(block_view(send, at_f, my_batch, c), q, out, *stream);
            at_b += cs[static_cast<size_t>(m)];
            at_f += my_batch * c;
        }
        stream->synchronize();
        Tensor recv_bytes = reuse_byte_buffer(backward_q_.recv, sum_of(cr), device);
        g_.cross->all_to_all_v(bytes, cs, recv_bytes, cr).wait();
        kernels::qcomm_decode(recv_bytes, q, recv, *stream);  // every row has node_cols columns
    }
    // 2. Inside the node: each member of a slot gets the slot's gradient in its columns.
    std::vector<int64_t> send_splits(static_cast<size_t>(L)), recv_splits(static_cast<size_t>(L));
    const int64_t d_me = dim_sum_per_rank_[static_cast<size_t>(me_)];
    for (int j = 0; j < L; ++j) {
        send_splits[static_cast<size_t>(j)] =
            rows * dim_sum_per_rank_[static_cast<size_t>(n * L + j)];
        int64_t rows_j = 0;
        for (int m = 0; m < N; ++m)
            rows_j += B[static_cast<size_t>(m * L + j)];
        recv_splits[static_cast<size_t>(j)] = rows_j * d_me;
    }
    const std::vector<int64_t> send_off = prefix(send_splits);
    Tensor intra_send = reuse_buffer(grad_intra_send_, 1, send_off.back(), DType::kF32, device);
    int64_t c = 0;
    for (const Slot& slot : slots_[static_cast<size_t>(n)]) {
        for (const auto& [r, col] : slot.members) {
            const size_t j = static_cast<size_t>(r - n * L);
            Tensor block = block_view(intra_send, send_off[j], rows,
                                      dim_sum_per_rank_[static_cast<size_t>(r)]);
            put_columns(block, col, recv, c, slot.cols, false, *stream);
        }
        c += slot.cols;
    }
    stream->synchronize();
    const int64_t global_batch = sum_of(B);
    Tensor intra_recv = reuse_buffer(grad_intra_recv_, global_batch, d_me, DType::kF32, device);
    std::vector<comm::Work> works;
    works.push_back(g_.intra->all_to_all_v(intra_send, send_splits, intra_recv, recv_splits));
    sent_bytes_.backward += (send_off.back() - send_splits[static_cast<size_t>(l)]) * kF32Bytes;
    Tensor grad_in = reuse_buffer(grad_in_, global_batch, d_me, DType::kF32, device);
    // Local rank j's block holds the rows of every node's rank j, in node order.
    auto finish = [intra_send, intra_recv, grad_in, B, L, N, world = world_, s = stream,
                   divide = gradient_division()]() mutable {
        const std::vector<int64_t> off = prefix(B);
        int64_t at = 0;
        for (int j = 0; j < L; ++j) {
            for (int m = 0; m < N; ++m) {
                const size_t r = static_cast<size_t>(m * L + j);
                copy_rows(grad_in, off[r], intra_recv, at, B[r], *s);
                at += B[r];
            }
        }
        if (divide)
            divide_by_world(grad_in, world, *s);
        s->synchronize();
        return grad_in;
    };
    return TensorAwaitable(std::move(works), std::move(finish));
}

Tensor HierarchicalPooledAllToAll::backward(const Tensor& grad_output) {
    return start_backward(grad_output).wait();
}

}  // namespace shardrec
