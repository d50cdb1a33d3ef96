// KJTAllToAll (TorchRec dist_data): redistributes a KJT so every rank receives its own features
// for the global batch. The input KJT lists its keys ordered by destination rank (splits[r] keys
// for rank r, the same splits and keys on every rank). Two phases, as TorchRec:
//   1. KJTAllToAllSplitsAwaitable: an all-to-all of the per-destination counts (bags, ids, the
//      source batch size, the weighted flag and the key count) so receivers can size buffers;
//   2. KJTAllToAllTensorsAwaitable: the all-to-alls of lengths, values and weights, all in flight
//      together, then the recat from [source rank][local feature][b] to
//      [local feature][source rank][b] (get_recat in permute_sparse_data.h).
// The output has my keys and stride sum_r B_r, source batches concatenated in rank order (in
// recat_rank_order(world, stagger) order when stagger > 1). Ranks may have different batch sizes;
// a rank with no keys still takes part. Host tensors (the MPI process group).
// Letters: F keys, B batch, N ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/tensor.h"
#include "engine/sparse/keyed_jagged_tensor.h"

namespace shardrec {

// What KJTAllToAll sends: a KJT's tensors (fixed stride) whose keys may repeat. Row-wise
// sharding's bucketized KJT lists every key once per bucket, as TorchRec's does, which a
// KeyedJaggedTensor (unique keys) cannot hold.
struct KJTAllToAllInput {
    std::vector<std::string> keys;  // [F]
    Tensor lengths;                 // [F * B] i64, key-major
    Tensor values;                  // [N] i64
    std::optional<Tensor> weights;  // [N] f32
    int64_t stride = 0;             // B

    // Throws for a variable stride per key (VBE is not supported by this all-to-all).
    static KJTAllToAllInput from_kjt(const KeyedJaggedTensor& kjt);
};

// The sizes phase 1 exchanged, indexed by rank (what the backward and the sequence all-to-all
// need). stride_per_rank[r] is the batch size of source rank r (TorchRec batch_size_per_rank);
// *_input_splits[r] is what this rank sent to rank r, *_output_splits[r] what it received from
// rank r, in elements. Weights have the values' splits.
struct KJTAllToAllSplits {
    std::vector<int64_t> stride_per_rank;
    std::vector<int64_t> lengths_input_splits;
    std::vector<int64_t> lengths_output_splits;
    std::vector<int64_t> values_input_splits;
    std::vector<int64_t> values_output_splits;
};

// The counts and receive buffers of one all-to-all in flight, grow-only and reused by later
// all-to-alls of the same KJTAllToAll once released (defined in kjt_all_to_all.cpp).
struct KJTAllToAllBuffers;

// Phase 2 in flight. wait() completes it and returns my KJT; it may be called once.
class KJTAllToAllTensorsAwaitable {
public:
    KJTAllToAllTensorsAwaitable(KJTAllToAllTensorsAwaitable&&) noexcept = default;
    KJTAllToAllTensorsAwaitable& operator=(KJTAllToAllTensorsAwaitable&&) noexcept = delete;
    KJTAllToAllTensorsAwaitable(const KJTAllToAllTensorsAwaitable&) = delete;
    KJTAllToAllTensorsAwaitable& operator=(const KJTAllToAllTensorsAwaitable&) = delete;
    ~KJTAllToAllTensorsAwaitable() = default;

    KeyedJaggedTensor wait();

    const KJTAllToAllSplits& splits() const { return splits_; }

private:
    friend class KJTAllToAllSplitsAwaitable;
    KJTAllToAllTensorsAwaitable() = default;

    std::vector<std::string> keys_;  // my keys
    int64_t stagger_ = 1;
    KJTAllToAllSplits splits_;
    KJTAllToAllInput input_;  // kept alive while the sends are in flight
    Tensor recv_lengths_, recv_values_;
    std::optional<Tensor> recv_weights_;
    std::shared_ptr<KJTAllToAllBuffers> buffers_;  // held until wait() has recat them
    std::shared_ptr<KJTBufferPool> outputs_;       // where wait() puts my KJT
    bool waited_ = false;
    std::vector<comm::Work> works_;  // last: destroyed (completed) before the buffers above
};

// Phase 1 in flight. tensors() completes it and starts phase 2 (once); wait() is
// tensors().wait(). splits() is valid once phase 1 completed.
class KJTAllToAllSplitsAwaitable {
public:
    KJTAllToAllSplitsAwaitable(KJTAllToAllSplitsAwaitable&&) noexcept = default;
    KJTAllToAllSplitsAwaitable& operator=(KJTAllToAllSplitsAwaitable&&) noexcept = delete;
    KJTAllToAllSplitsAwaitable(const KJTAllToAllSplitsAwaitable&) = delete;
    KJTAllToAllSplitsAwaitable& operator=(const KJTAllToAllSplitsAwaitable&) = delete;
    ~KJTAllToAllSplitsAwaitable() = default;

    KJTAllToAllTensorsAwaitable tensors();
    KeyedJaggedTensor wait();

    const KJTAllToAllSplits& splits() const;

private:
    friend class KJTAllToAll;
    KJTAllToAllSplitsAwaitable() = default;

    void check_received_counts(const std::vector<int64_t>& recv) const;

    std::shared_ptr<comm::ProcessGroup> pg_;
    std::vector<int64_t> key_splits_;
    int64_t stagger_ = 1;
    KJTAllToAllInput input_;
    Tensor send_counts_, recv_counts_;  // [world, kCounts] i64
    KJTAllToAllSplits splits_;
    std::shared_ptr<KJTAllToAllBuffers> buffers_;  // handed to phase 2
    std::shared_ptr<KJTBufferPool> outputs_;
    bool started_tensors_ = false;
    std::vector<comm::Work> works_;  // last: destroyed (completed) before the buffers above
};

class KJTAllToAll {
public:
    // splits[r]: number of keys sent to rank r (sum = the input's key count), the same on every
    // rank. stagger: TorchRec's recat stagger (TWRW: world size / local size); must divide the
    // group size.
    KJTAllToAll(std::shared_ptr<comm::ProcessGroup> pg,
                std::vector<int64_t> splits,
                int64_t stagger = 1);

    // Starts phase 1 (TorchRec KJTAllToAll.forward). Every rank must call it, in the same order
    // as its other collectives on this group. The input's tensors are referenced, not copied:
    // leave them unchanged until the returned awaitable is waited for.
    KJTAllToAllSplitsAwaitable start(const KeyedJaggedTensor& input) const;
    KJTAllToAllSplitsAwaitable start(KJTAllToAllInput input) const;

    const std::vector<int64_t>& splits() const { return splits_; }

    int64_t stagger() const { return stagger_; }

    const std::shared_ptr<comm::ProcessGroup>& pg() const { return pg_; }

private:
    std::shared_ptr<comm::ProcessGroup> pg_;
    std::vector<int64_t> splits_;
    int64_t stagger_;
    // Buffer sets of earlier all-to-alls; one only this vector holds is free. Several may be in
    // flight at once (a pipelined batch and an evaluation batch), so one set would not do.
    mutable std::vector<std::shared_ptr<KJTAllToAllBuffers>> buffers_;
    // The received KJTs' buffers, which live as long as the KJTs (the batch's lookup and backward).
    std::shared_ptr<KJTBufferPool> outputs_ = std::make_shared<KJTBufferPool>();
};

}  // namespace shardrec
