#include "engine/data/batch_prefetcher.h"

#include <chrono>

namespace shardrec::data {

BatchPrefetcher::BatchPrefetcher(Producer producer, int depth)
    : producer_(std::move(producer)), depth_(depth < 0 ? 0 : depth) {}

BatchPrefetcher::~BatchPrefetcher() {
    for (auto& [step, future] : in_flight_) {
        if (future.valid()) {
            future.wait();  // a producer error is dropped: nobody asked for that batch
        }
    }
}

Batch BatchPrefetcher::get(int64_t step, double* wait_s) {
    const auto t0 = std::chrono::steady_clock::now();
    // Batches of steps before this one will not be asked for (a resume or a jump): drop them.
    while (!in_flight_.empty() && in_flight_.begin()->first < step) {
        in_flight_.begin()->second.wait();
        in_flight_.erase(in_flight_.begin());
    }
    Batch batch;
    const auto it = in_flight_.find(step);
    if (it != in_flight_.end()) {
        std::future<Batch> future = std::move(it->second);
        in_flight_.erase(it);
        batch = future.get();
    } else {
        batch = producer_(step);
    }
    if (wait_s != nullptr) {
        *wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    for (int64_t s = step + 1; s <= step + depth_; ++s) {
        if (in_flight_.count(s) == 0) {
            in_flight_.emplace(s, std::async(std::launch::async, producer_, s));
        }
    }
    return batch;
}

}  // namespace shardrec::data
