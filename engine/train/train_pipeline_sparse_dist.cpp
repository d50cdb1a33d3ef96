// The three stages of TrainPipelineSparseDist. One progress() call, with i the oldest queued step:
//   1. copy stage: top the queue up to kDepth (on the first call batches i, i+1 and i+2);
//   2. batch i's before_forward (the resets of the rows its managed-collision remap evicted);
//   3. a batch whose input dist never started (the first, or after a drain) is distributed now;
//   4. input dist of batch i+1: phase 1 (splits) is posted and completed, phase 2 (lengths,
//      values, weights) is posted and left in flight;
//   5. batch i trains; its sparse forward takes its input dist from the pipeline;
//   6. batch i+1's phase 2 completes (MPI progressed it inside batch i's collectives).
// Every rank runs the same stages for the same steps, so the collectives match.
#include "engine/train/train_pipeline_sparse_dist.h"

#include <chrono>
#include <exception>
#include <thread>

#include "engine/core/pinned_buffer.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"

namespace shardrec::train {

struct TrainPipelineSparseDist::InFlight {
    explicit InFlight(Device device)
        : copy_begin(device, true),
          copied(device, true),
          distributed(device),
          compute_begin(device, true),
          trained(device, true) {}

    TrainInput input;                   // the host batch
    Batch device_batch;                 // what the model reads: input.batch itself on the CPU
    std::optional<BatchStager> stager;  // CUDA: the copy, through pinned staging
    std::unique_ptr<ShardedEmbeddingBagCollection::InputDist> dist;  // sharded arch only
    bool dist_started = false;
    double input_dist_ms = 0;  // host time in this batch's input dist calls
    double prefetch_ahead_ms = 0, prefetch_ms = 0;
    bool timed = false;  // trained; its stage times not yet added up
    Event copy_begin;
    Event copied;       // copy stream: device_batch is complete
    Event distributed;  // data-dist stream: dist has received every shard's features
    Event compute_begin;
    Event trained;  // compute stream: nothing reads this slot's buffers any more
};

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

TrainPipelineSparseDist::TrainPipelineSparseDist(TrainPipelineBase& compute,
                                                 RecModel& model,
                                                 bool prefetch)
    : compute_(compute),
      model_(model),
      device_(compute.device()),
      sharded_(dynamic_cast<ShardedEmbeddingBagCollection*>(&model.sparse_arch())),
      prefetch_(prefetch && sharded_ != nullptr && sharded_->has_cached_shards()),
      copy_stream_(device_),
      data_dist_stream_(device_) {}

// Queued input dists are complete (step 5), so dropping them leaves nothing in flight.
TrainPipelineSparseDist::~TrainPipelineSparseDist() = default;

// The slot of the batch trained last stays free: its backward and optimizer may still run, and
// waiting for them here would leave the device idle while this call stages the next batches and
// enqueues the next forward. The one before it has finished: the last step read its loss, so
// the compute stream passed that batch's forward, and so the whole of the batch before.
std::unique_ptr<TrainPipelineSparseDist::InFlight> TrainPipelineSparseDist::take_free_slot() {
    if (free_.size() < 2)
        return std::make_unique<InFlight>(device_);
    std::unique_ptr<InFlight> slot = std::move(free_.front());
    free_.pop_front();
    slot->trained.synchronize();  // returns at once (see above); kept as the guarantee
    add_stage_times(*slot);
    return slot;
}

void TrainPipelineSparseDist::add_stage_times(InFlight& slot) {
    if (!slot.timed)
        return;
    slot.timed = false;
    times_.steps += 1;
    times_.copy_ms += Event::elapsed_ms(slot.copy_begin, slot.copied);
    times_.input_dist_ms += slot.input_dist_ms;
    times_.prefetch_ahead_ms += slot.prefetch_ahead_ms;
    times_.prefetch_ms += slot.prefetch_ms;
    times_.compute_ms += Event::elapsed_ms(slot.compute_begin, slot.trained);
}

StageTimes TrainPipelineSparseDist::stage_times() {
    for (std::unique_ptr<InFlight>& slot : free_) {
        slot->trained.synchronize();
        add_stage_times(*slot);
    }
    return times_;
}

void TrainPipelineSparseDist::reset_stage_times() {
    (void)stage_times();
    times_ = StageTimes{};
}

// Dense features and labels go to the device on the copy stream (the slot's storage stays until
// its `trained` event has passed); the KJT stays on the host, where the MPI input dist and the
// bucketize of row-wise sharding read it, and the sparse arch stages it for its lookups.
Batch TrainPipelineSparseDist::copy_to_device(InFlight& slot) {
    const Batch& host = slot.input.batch;
    if (device_.is_cpu()) {
        slot.copy_begin.record(copy_stream_);
        return host;
    }
    if (!slot.stager)
        slot.stager.emplace(device_);
    Batch out = slot.stager->stage(host);
    slot.copy_begin.record(copy_stream_);  // after the host's staging: the transfers alone
    slot.stager->end(copy_stream_);
    return out;
}

void TrainPipelineSparseDist::enqueue(DataIterator& inputs) {
    std::optional<TrainInput> input = inputs.next();
    if (!input)
        return;
    std::unique_ptr<InFlight> slot = take_free_slot();
    slot->input = std::move(*input);
    slot->device_batch = copy_to_device(*slot);
    slot->copied.record(copy_stream_);
    slot->dist.reset();
    slot->dist_started = false;
    slot->input_dist_ms = 0;
    slot->prefetch_ahead_ms = 0;
    slot->prefetch_ms = 0;
    queue_.push_back(std::move(slot));
}

void TrainPipelineSparseDist::start_sparse_data_dist(InFlight& slot) {
    slot.dist_started = true;
    slot.copied.wait(data_dist_stream_);
    if (sharded_ == nullptr)
        return;
    const Clock::time_point t0 = Clock::now();
    slot.dist = sharded_->input_dist(slot.device_batch.sparse);
    sharded_->input_dist_start_tensors(*slot.dist);
    slot.input_dist_ms += ms_since(t0);
}

void TrainPipelineSparseDist::wait_sparse_data_dist(InFlight& slot) {
    if (sharded_ != nullptr) {
        const Clock::time_point t0 = Clock::now();
        sharded_->input_dist_wait(*slot.dist);
        slot.input_dist_ms += ms_since(t0);
    }
    slot.distributed.record(data_dist_stream_);
}

std::optional<TrainOutput> TrainPipelineSparseDist::progress(DataIterator& inputs) {
    while (num_queued() < kDepth + (prefetch_ ? 1 : 0)) {
        const int64_t before = num_queued();
        enqueue(inputs);
        if (num_queued() == before)
            break;  // exhausted: the queue drains
    }
    if (queue_.empty())
        return std::nullopt;
    InFlight& batch = *queue_.front();
    // Batch i-1 has run its updates (its compute is on the stream before; the prefetch thread
    // of the call before has ended): batch i's evicted rows can be reset now.
    if (batch.input.before_forward)
        batch.input.before_forward(compute_.stream());
    if (!batch.dist_started) {  // filling: nothing to overlap with
        start_sparse_data_dist(batch);
        wait_sparse_data_dist(batch);
    }
    InFlight* next = queue_.size() > 1 ? queue_[1].get() : nullptr;
    // The dist in flight during this batch's compute: batch i+1's, or with prefetch i+2's
    // (i+1's completed before, so that its rows can be fetched now).
    InFlight* in_flight = next;
    std::thread ahead;
    std::exception_ptr ahead_error;
    if (prefetch_) {
        if (next != nullptr && !next->dist_started) {  // filling
            start_sparse_data_dist(*next);
            wait_sparse_data_dist(*next);
        }
        const Clock::time_point t0 = Clock::now();
        sharded_->prefetch(*batch.dist, compute_.stream());
        batch.prefetch_ms += ms_since(t0);
        in_flight = queue_.size() > 2 ? queue_[2].get() : nullptr;
        if (next != nullptr) {
            ahead = std::thread([this, next, &ahead_error] {
                try {
                    const Clock::time_point t1 = Clock::now();
                    sharded_->prefetch_ahead(*next->dist);
                    next->prefetch_ahead_ms += ms_since(t1);
                } catch (...) {
                    ahead_error = std::current_exception();
                }
            });
        }
    }
    if (in_flight != nullptr)
        start_sparse_data_dist(*in_flight);

    batch.distributed.wait(compute_.stream());
    batch.compute_begin.record(compute_.stream());
    if (sharded_ != nullptr)
        sharded_->set_pipelined_input(std::move(batch.dist));
    const TrainInput& in = batch.input;
    StepResult result;
    try {
        result = compute_.progress(batch.device_batch, in.dense_lr, in.sparse_lr, in.input_finite);
    } catch (...) {
        if (ahead.joinable())
            ahead.join();
        throw;
    }
    if (ahead.joinable())
        ahead.join();
    if (ahead_error)
        std::rethrow_exception(ahead_error);
    SR_CHECK(sharded_ == nullptr || !sharded_->has_pipelined_input(),
             "TrainPipelineSparseDist: the model's forward of step {} did not read the sparse "
             "features the pipeline distributed",
             in.step + 1);
    batch.trained.record(compute_.stream());
    batch.timed = true;

    if (in_flight != nullptr)
        wait_sparse_data_dist(*in_flight);
    TrainOutput out{in.step, result};
    free_.push_back(std::move(queue_.front()));
    queue_.pop_front();
    return out;
}

}  // namespace shardrec::train
