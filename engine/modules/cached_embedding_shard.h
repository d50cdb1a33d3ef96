// A table shard whose rows and optimizer state live in a slower tier, with a cache of them where
// the lookup kernels run (TorchRec's key_value kernel on the CPU: rows in a KeyValueStore file, the
// cache in DRAM).
//
// The cache is set-associative (FBGEMM's layout: sets of up to 32 ways, a row's set from a hash
// of its id) and holds each cached row's weights and optimizer state. Before a batch's lookups,
// prefetch() makes every row it uses resident and translates its ids into cache slots; the
// unchanged TBE kernels then pool and update the slots. Rows a batch uses are locked until the
// next prefetch; a miss evicts the least recently (lru) or least frequently (lfu, ties by
// recency) used unlocked way of its set, writing it back first when the optimizer changed it.
// A row whose set has no unlocked way (a batch with more distinct rows than the cache, or many
// in one set) goes to an overflow area past the cache, written back at the next prefetch, so
// every cache size gives the same numbers; the overflow is counted in the statistics.
//
// Exactness: the kernels aggregate each row's gradient in id order whatever the row's number
// (a stable sort by row) and update rows independently, and a row's value moves between tiers
// bit for bit, so training with any cache equals training with the rows in memory. With a cache
// precision below the table's (f16, bf16), a cached row is rounded to it when it enters the
// cache and after each update (the kernels update in f32), and widened back on its way out.
//
// A row never written to the store is at its initial value: the weights from the same pure
// function of (seed, table, row, column) as in-memory tables, the optimizer state at its start.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/config/sharding_names.h"
#include "engine/core/tensor.h"
#include "engine/modules/key_value_store.h"
#include "kernels/embedding_optimizer.h"

namespace shardrec {

// Counters since the start (TorchRec's cache statistics): unique rows per batch summed.
struct CacheStats {
    int64_t lookups = 0;      // ids looked up
    int64_t unique_rows = 0;  // distinct rows per batch, summed over batches
    int64_t misses = 0;       // distinct rows that were not resident
    int64_t overflow = 0;     // misses that went to the overflow area
    int64_t bytes_in = 0;     // read from the slower tier
    int64_t bytes_out = 0;    // written back to it

    double hit_rate() const {
        return unique_rows == 0
                   ? 1.0
                   : 1.0 - static_cast<double>(misses) / static_cast<double>(unique_rows);
    }
};

class CachedEmbeddingShard {
public:
    // The shard [row_offset, +rows) x [col_offset, +cols) of table `table` (index `table_index`
    // in its collection, E rows in all); its rows in `path`; `rank` for errors.
    struct Layout {
        std::string table;
        int64_t table_index = 0;
        int64_t num_embeddings = 0;
        int64_t row_offset = 0, rows = 0, col_offset = 0, cols = 0;
        DType dtype = DType::kF32;
        uint64_t seed = 0;
        int rank = 0;
    };

    CachedEmbeddingShard(const Layout& layout,
                         const CacheParams& cache,
                         const kernels::FusedOptimizerParams& optim,
                         const std::string& path);

    // What the kernels read and update: [capacity, cols] rows of the table's dtype, the
    // optimizer state as kernels/embedding_optimizer.h lays it out (undefined where unused), and
    // {0, capacity}. Capacity is the cache's slots plus the overflow area; these tensors are
    // replaced when the overflow area grows (read them after prefetch).
    Tensor weights, state1, state2;
    Tensor table_offsets;

    // Makes the rows of `ids` (shard rows, [N] i64) resident and writes their slots into
    // `slots` ([N] i64), for the batch that trains next (the one before has finished). An id
    // outside [0, rows) is an Error naming the table.
    void prefetch(const Tensor& ids, Tensor& slots);
    // The prefetch pipeline: on another thread while the batch of the latest prefetch() trains,
    // makes rows of the next batch resident without touching that batch's rows, its overflow
    // or what its training reads and writes (its slots, dirty marks and the kernels' tensors,
    // which do not grow here). The next batch's prefetch() then finds them; it fills and
    // counts whatever this left out. Not concurrent with prefetch, flush or checkpoints.
    void prefetch_ahead(const Tensor& ids);
    // The optimizer changed the rows of the latest prefetch (the batch's backward ran).
    void mark_updated();
    // Writes every changed row back to the store; the cache keeps them.
    void flush();

    // ---- checkpoints (flush first) ----
    // The rows not at their initial value, ascending.
    std::vector<int64_t> stored_rows() const { return store_.stored_rows(); }

    // Rows `rows` (ascending) into weight [n, cols] and states (as optimizer_state) from the
    // store or their initial value.
    void read_rows(const std::vector<int64_t>& rows, Tensor& weight, std::vector<Tensor>& states);
    // Every stored row, in the store's order (sequential reads), `chunk` rows at a time:
    // fn(rows, weight [n, cols], states).
    void scan_stored(
        int64_t chunk,
        const std::function<
            void(const std::vector<int64_t>&, const Tensor&, const std::vector<Tensor>&)>& fn);
    // Empties the cache and the store: every row at its initial value.
    void reset();
    // Rows `rows` (ascending) from weight [n, cols] and states into the store (after reset).
    void write_rows(const std::vector<int64_t>& rows,
                    const Tensor& weight,
                    const std::vector<Tensor>& states);

    const Layout& layout() const { return layout_; }

    int64_t slots() const { return slots_; }

    const CacheStats& stats() const { return stats_; }

    // Bytes held in memory: the slots with their state, and the overflow area.
    int64_t cache_bytes() const;

    int64_t disk_bytes() const { return store_.disk_bytes(); }

    // The disk its rows take once every one of them has been written.
    int64_t full_disk_bytes() const { return store_.rows() * store_.record_bytes(); }

private:
    int64_t payload_bytes() const;
    void copy_out(int64_t slot, char* payload) const;
    void copy_in(int64_t slot, const char* payload);
    float state1_initial() const;
    void unpack(const char* payloads, int64_t n, Tensor& weight, std::vector<Tensor>& states) const;
    void init_payload(int64_t row, char* payload) const;
    void init_slot(int64_t slot, int64_t row);
    void ensure_capacity(int64_t capacity);
    void check_ids(const Tensor& ids) const;
    void place(const int64_t* ids, int64_t n, int64_t* out);
    int64_t victim(int64_t set) const;  // an unlocked way of the set, or -1
    void retire_overflow();             // overflow rows back to the store, the area emptied

    Layout layout_;
    kernels::FusedOptimizerParams optim_;
    CacheAlgorithm algorithm_;
    DType slot_dtype_;  // cache precision (the store keeps layout_.dtype)
    KeyValueStore store_;
    int64_t ways_ = 1, sets_ = 1, slots_ = 1, capacity_ = 0;
    std::vector<int64_t> slot_row_;    // -1: empty
    std::vector<int64_t> slot_tick_;   // the batch (tick) that last used it
    std::vector<int64_t> slot_batch_;  // the prefetch() that put it in batch_slots_
    std::vector<int64_t> slot_count_;  // lfu: ids looked up since it was filled
    std::vector<uint8_t> slot_dirty_;
    std::vector<int64_t> overflow_rows_;
    std::unordered_map<int64_t, int64_t> overflow_slot_;
    std::vector<uint8_t> overflow_dirty_;
    std::vector<int64_t> batch_slots_;  // distinct slots of the latest prefetch
    int64_t tick_ = 0;                  // the batch of the latest prefetch()
    int64_t lock_from_ = 0;             // slots used by batches from this tick on are not evicted
    int64_t batch_gen_ = 0;
    CacheStats stats_;
    // Scratch of a prefetch: evicted rows with their payloads, and the rows to fill.
    std::vector<int64_t> evict_rows_, fill_rows_, fill_slots_, read_rows_, read_slots_;
    std::vector<char> evict_buf_, read_buf_;
};

}  // namespace shardrec
