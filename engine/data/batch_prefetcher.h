// Keeps the data path off the training critical path: while step s trains, a background thread
// already produces the batches of steps s+1 .. s+depth. get(step) returns exactly what
// producer(step) returns, in any order of calls (a batch not prefetched is produced on the
// spot), and reports how long the caller waited for it (the loader-wait time of the step).
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>

#include "engine/sparse/batch.h"

namespace shardrec::data {

class BatchPrefetcher {
public:
    using Producer = std::function<Batch(int64_t step)>;

    // depth 0 produces every batch on the caller's thread.
    BatchPrefetcher(Producer producer, int depth);
    BatchPrefetcher(const BatchPrefetcher&) = delete;
    BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;
    BatchPrefetcher(BatchPrefetcher&&) = delete;
    BatchPrefetcher& operator=(BatchPrefetcher&&) = delete;
    ~BatchPrefetcher();  // waits for the batches in flight

    // The batch of `step`; *wait_s (if given) receives the seconds this call blocked. An error
    // of the producer is rethrown here, on the caller's thread.
    Batch get(int64_t step, double* wait_s = nullptr);

private:
    Producer producer_;
    int depth_;
    std::map<int64_t, std::future<Batch>> in_flight_;
};

}  // namespace shardrec::data
