// Hierarchical output dists for row-sharded tables (TorchRec TWRW's intra-node reduce-scatter +
// cross-node all-to-all; HugeCTR's hierarchical all-to-all): the partial sums that the ranks of
// one node hold for the same samples are added inside the node first, so one sum per node pair
// crosses hosts instead of one per rank. Nodes are consecutive blocks of local_size ranks
// (comm::intra_and_cross_node_pg). The intra-node step always runs in f32; comm.qcomms applies
// to the cross-node step only (the slow links).
//   HierarchicalReduceScatter (row_wise): an intra-node reduce-scatter, then a cross-node one;
//     backward: a cross-node all-gather, then an intra-node one. Results equal
//     PooledEmbeddingsReduceScatter's within rounding (the sum is taken node by node, a different
//     order); the backward is bitwise the flat one (copies only).
//   HierarchicalPooledAllToAll (table_wise, column_wise, table_row_wise): rank r's columns are
//     segments; segments with the same tie on one node are partial sums of one output (TWRW
//     shards of one feature). They are added inside the node, in rank then segment order from
//     zero, and the sum comes back in the node's first tied segment, zeros in the others; the
//     caller adds the segments as it does the flat result, so each output is bitwise the flat
//     one where a tie's segments all lie on one node (the planner's TWRW). Backward: a tie's
//     segments must carry the same gradient (the caller copies one output's gradient into each);
//     the first segment's travels once per node and is copied to the others.
// Both keep the interface (tensors, layouts, buffer reuse, gradient division) of the flat
// modules in pooled_embeddings.h; sent_bytes() counts the bytes of both steps, and of the
// cross-node step in *_cross_node.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/distributed/pooled_embeddings.h"

namespace shardrec {

// comm.hierarchical: auto (on when there is more than one node and rows of a table are split
// inside a node: row_wise, table_row_wise), true, false.
enum class HierarchicalMode { kAuto, kOn, kOff };
HierarchicalMode hierarchical_mode_from_name(const std::string& name);

// Whether the output dists of row-sharded tables go hierarchical: `mode` when it is on or off;
// auto: on for more than one node of more than one rank where a table's rows are split inside a
// node.
bool use_hierarchical(HierarchicalMode mode, int world, int local_size, bool rows_split_in_node);

// The bytes of `bytes_to_rank` (per destination rank of a group of consecutive nodes of
// local_size ranks) that leave `me`'s node.
int64_t cross_node_bytes(const std::vector<int64_t>& bytes_to_rank, int me, int local_size);

// The ranks per node of `pg` when it spans the launched world (process_info's local size), else
// pg's size (one node: nothing crosses).
int node_local_size(const comm::ProcessGroup& pg);

// The intra- and cross-node groups of a group and its node shape.
struct NodeGroups {
    std::shared_ptr<comm::ProcessGroup> intra, cross;
    int local_size = 1;
    int nodes = 1;
};

// Collective over pg (two splits, the same order on every rank).
NodeGroups make_node_groups(comm::ProcessGroup& pg, int local_size);

class HierarchicalReduceScatter {
public:
    HierarchicalReduceScatter(NodeGroups groups, QCommsConfig qcomms = {});

    // As PooledEmbeddingsReduceScatter::start_forward / start_backward over the world
    // (input_splits: one entry per world rank).
    TensorAwaitable start_forward(const Tensor& local_embs,
                                  const std::vector<int64_t>& input_splits = {});
    Tensor forward(const Tensor& local_embs, const std::vector<int64_t>& input_splits = {});
    TensorAwaitable start_backward(const Tensor& grad_output);
    Tensor backward(const Tensor& grad_output);

    const CommBytes& sent_bytes() const { return sent_bytes_; }

private:
    NodeGroups g_;
    int world_ = 1, me_ = 0;
    QCommsConfig qcomms_;
    CommBytes sent_bytes_;
    QuantizedBuffers forward_q_, backward_q_;
    std::vector<int64_t> input_splits_;  // rows per world rank, of the latest forward
    int64_t dim_ = 0;
    Tensor send_, mid_, out_, grad_mid_, grad_gathered_, grad_in_;
    std::unique_ptr<Stream> stream_;
};

// One column block of a rank's pooled output: `cols` wide; tie >= 0 marks partial sums of one
// output (equal ties on one node are added there).
struct PooledSegment {
    int64_t cols = 0;
    int64_t tie = -1;
};

class HierarchicalPooledAllToAll {
public:
    // segments_per_rank[r]: rank r's columns, in order (the same on every rank).
    HierarchicalPooledAllToAll(NodeGroups groups,
                               std::vector<std::vector<PooledSegment>> segments_per_rank,
                               QCommsConfig qcomms = {});

    // As PooledEmbeddingsAllToAll (the same layouts; a tie's sum in its first segment).
    TensorAwaitable start_forward(const Tensor& local_embs,
                                  const std::vector<int64_t>& batch_size_per_rank = {});
    Tensor forward(const Tensor& local_embs, const std::vector<int64_t>& batch_size_per_rank = {});
    TensorAwaitable start_backward(const Tensor& grad_output);
    Tensor backward(const Tensor& grad_output);

    const CommBytes& sent_bytes() const { return sent_bytes_; }

    // The distinct outputs of a node: each is one segment or one tie of its ranks.
    struct Slot {
        int64_t cols = 0;
        std::vector<std::pair<int, int64_t>> members;  // (rank, column in its block), in order
        int64_t out_col = 0;  // the first member's column in the flat output
    };

private:
    NodeGroups g_;
    int world_ = 1, me_ = 0;
    QCommsConfig qcomms_;
    CommBytes sent_bytes_;
    QuantizedBuffers forward_q_, backward_q_;
    std::vector<int64_t> dim_sum_per_rank_, dim_offsets_;
    std::vector<std::vector<Slot>> slots_;  // per node
    std::vector<int64_t> node_cols_;        // per node: the sum of its slots' columns
    std::vector<int64_t> batch_size_per_rank_;
    Tensor send_, recv_, cross_send_, cross_recv_, out_;
    Tensor grad_send_, grad_recv_, grad_intra_send_, grad_intra_recv_, grad_in_;
    std::unique_ptr<Stream> stream_;
};

}  // namespace shardrec
