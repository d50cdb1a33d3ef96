// TrainPipelineSparseDist (TorchRec): three batches in flight, one per stage and stream.
//   copy stream:      the host-to-device copy of batch i+2 (pinned staging; nothing on CPU);
//   data-dist stream: the input dist (KJT all-to-alls) of batch i+1, after its copy's event;
//   compute stream:   forward, loss, backward, fused sparse update and dense step of batch i
//                     (TrainPipelineBase::progress), after its input dist's event.
// Each batch's buffers (host batch, staging, device batch, all-to-all buffers) belong to its
// in-flight slot, which is recycled only after the compute stream has passed the batch's event;
// a fourth slot keeps the host from waiting for batch i's backward before it stages batch i+3
// and enqueues batch i+1 (device frees wait for every stream, so the modules may regrow buffers
// that queued kernels still read).
// Exactness: the input dist only moves ids, and batch i+1's lookups run inside its own forward,
// after batch i's fused optimizer updated the rows, so the numbers are TrainPipelineBase's (the
// "pipelines agree" test). A managed-collision remap runs when a batch is queued, ahead of the
// steps before it (its decisions depend on the ids alone); the rows it evicts are reset by the
// batch's before_forward, after those steps' updates. On CPU the all-to-alls of batch i+1 are
// non-blocking MPI collectives posted before batch i's compute and completed after it; MPI
// progresses them inside batch i's own collectives. Without a sharded sparse arch (one process)
// only the copy stage remains.
//
// With prefetch (TorchRec PrefetchTrainPipelineSparseDist, train.pipeline prefetch_sparse_dist)
// a fourth stage fills the key_value caches: batch i+1's input dist completes one step earlier
// (the dist of batch i+2 is the one in flight during batch i), and while batch i trains a host
// thread fills the caches with batch i+1's rows (ShardedEmbeddingBagCollection::prefetch_ahead);
// batch i+1 then fills only what that left before its forward. The fills only move rows that
// no batch in flight uses, so the numbers are the sparse_dist pipeline's.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/stream.h"
#include "engine/train/train_pipeline_base.h"

namespace shardrec {
class ShardedEmbeddingBagCollection;
}

namespace shardrec::train {

// One train step's input as the pipelines take it: TorchRec's dataloader_iter item, plus the
// step's learning rates (which TorchRec's optimizer and scheduler carry).
struct TrainInput {
    int64_t step = 0;          // 0-based
    Batch batch;               // host tensors
    bool input_finite = true;  // BatchChecker's verdict on the dense features and labels
    float dense_lr = 0;
    float sparse_lr = 0;
    // Work on the compute stream that must follow every earlier step's updates and precede this
    // step's lookups: the resets of the rows its managed-collision remap evicted. Empty if none.
    std::function<void(Stream&)> before_forward;
};

// Yields train inputs in step order; nullopt once exhausted (and on every call after).
class DataIterator {
public:
    virtual ~DataIterator() = default;
    virtual std::optional<TrainInput> next() = 0;
};

struct TrainOutput {
    int64_t step = 0;
    StepResult result;
};

// Time per stage summed over trained steps: the copy and compute streams' from events on them,
// the input dist's on the host (posting and completing the KJT all-to-alls, which run over MPI).
// The copy and the input dist are hidden when the step takes about the compute time alone.
struct StageTimes {
    int64_t steps = 0;
    double copy_ms = 0;        // copy stream: the batch's host-to-device copy (0 on the CPU)
    double input_dist_ms = 0;  // host: the batch's input dist calls
    // compute stream: from the batch's first operation to its last (forward, backward,
    // optimizers), with the gaps where the stream waits for the host
    double compute_ms = 0;
    // prefetch: the cache fills of the batch on the prefetch thread, during the batch before
    // (hidden when shorter than its compute), and those left to do before its forward (host)
    double prefetch_ahead_ms = 0;
    double prefetch_ms = 0;
};

class TrainPipelineSparseDist {
public:
    // compute: the step of one batch on its compute stream and device (its model is the one
    // trained here).
    TrainPipelineSparseDist(TrainPipelineBase& compute, RecModel& model, bool prefetch = false);
    ~TrainPipelineSparseDist();
    TrainPipelineSparseDist(const TrainPipelineSparseDist&) = delete;
    TrainPipelineSparseDist& operator=(const TrainPipelineSparseDist&) = delete;

    // Trains the oldest queued step after topping the queue up to three from `inputs`; nullopt
    // when `inputs` is exhausted and nothing is queued (the last two calls drain the queue).
    // Collective when the sparse arch is sharded: every rank calls it with the same steps.
    std::optional<TrainOutput> progress(DataIterator& inputs);

    // Steps taken from an iterator and not trained yet (0, 1 or 2 between calls).
    int64_t num_queued() const { return static_cast<int64_t>(queue_.size()); }

    // The stage times of the steps trained since construction or reset_stage_times() (waits
    // for the compute stream to finish the last of them).
    StageTimes stage_times();
    void reset_stage_times();

    static constexpr int64_t kDepth = 3;  // batches i, i+1, i+2 (prefetch: and i+3)

private:
    struct InFlight;

    void enqueue(DataIterator& inputs);  // copy stage of one more batch, if there is one
    Batch copy_to_device(InFlight& slot);
    void start_sparse_data_dist(InFlight& slot);
    void wait_sparse_data_dist(InFlight& slot);
    std::unique_ptr<InFlight> take_free_slot();
    void add_stage_times(InFlight& slot);  // once its compute finished

    TrainPipelineBase& compute_;
    RecModel& model_;
    Device device_;
    ShardedEmbeddingBagCollection* sharded_;  // null when the tables are not sharded
    bool prefetch_;                           // the cache-fill stage (key_value shards only)
    Stream copy_stream_;
    Stream data_dist_stream_;                      // the compute stream is compute_.stream()
    std::deque<std::unique_ptr<InFlight>> queue_;  // front: batch i
    std::deque<std::unique_ptr<InFlight>> free_;   // trained, oldest first, waiting for reuse
    StageTimes times_;
};

}  // namespace shardrec::train
