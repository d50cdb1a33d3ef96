// A table shard whose rows and optimizer state live in a slower tier, with a cache of them where
// the lookup kernels run: TorchRec's key_value kernel on the CPU (the rows in a KeyValueStore file
// on local disk, the cache in DRAM) and its fused_uvm_caching kernel on a GPU (the rows in a
// HostRowStore in host memory, the cache in HBM).
//
// The cache is set-associative (FBGEMM's layout: sets of up to 32 ways, a row's set from a hash
// of its id) and holds each cached row's weights and optimizer state. Before a batch's lookups,
// prefetch() makes every row it uses resident and translates its ids into cache slots; the
// unchanged TBE kernels then pool and update the slots. Rows a batch uses are locked until the
// next prefetch; a miss evicts the least recently (lru) or least frequently (lfu: the ids looked
// up of the row since the start, as FBGEMM counts them, ties by recency) used unlocked way of its
// set, writing it back first when the optimizer changed it.
// A row whose set has no unlocked way (a batch with more distinct rows than the cache, or many
// in one set) goes to an overflow area past the cache, written back at the next prefetch, so
// every cache size gives the same numbers; the overflow is counted in the statistics.
//
// The index (which row each slot holds, its recency and count) lives on the host, as the ids
// after the input dist do. Rows move between the tiers in batches (kernels/cache_rows.h): a
// prefetch writes its evicted rows back in one pack, then fills its misses in one unpack; on a
// GPU both run on the batch's stream (an eviction waits for the copy back to the host), and
// prefetch_ahead moves its rows on a stream of its own once the batch before has updated them.
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
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/config/sharding_names.h"
#include "engine/core/pinned_buffer.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/modules/row_store.h"
#include "kernels/embedding_optimizer.h"

namespace shardrec {

// Counters since the start (TorchRec's cache statistics): unique rows per batch summed.
struct CacheStats {
    int64_t lookups = 0;      // ids looked up
    int64_t unique_rows = 0;  // distinct rows per batch, summed over batches
    int64_t misses = 0;       // distinct rows that were not resident
    int64_t overflow = 0;     // misses that went to the overflow area
    int64_t bytes_in = 0;     // read from the slower tier (rows stored there)
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
    // in its collection, E rows in all); the cache on `device`; `rank` for errors.
    struct Layout {
        std::string table;
        int64_t table_index = 0;
        int64_t num_embeddings = 0;
        int64_t row_offset = 0, rows = 0, col_offset = 0, cols = 0;
        DType dtype = DType::kF32;
        uint64_t seed = 0;
        int rank = 0;
        Device device = Device::cpu();
    };

    // `store`: the slower tier, for layout.rows payloads of payload_bytes(layout, optim).
    CachedEmbeddingShard(const Layout& layout,
                         const CacheParams& cache,
                         const kernels::FusedOptimizerParams& optim,
                         std::unique_ptr<RowStore> store);

    // A row's payload in the store: its weights in the table's dtype, then its optimizer state.
    static int64_t payload_bytes(const Layout& layout, const kernels::FusedOptimizerParams& optim);
    // "table 'big' rows [0, 100) columns [0, 64) on rank 1", for errors.
    static std::string owner(const Layout& layout);

    // What the kernels read and update: [capacity, cols] rows of the table's dtype, the
    // optimizer state as kernels/embedding_optimizer.h lays it out (undefined where unused), and
    // {0, capacity}. Capacity is the cache's slots plus the overflow area; these tensors are
    // replaced when the overflow area grows (read them after prefetch).
    Tensor weights, state1, state2;
    Tensor table_offsets;

    // Makes the rows of `ids` (shard rows, host [N] i64) resident and writes their slots into
    // `slots` (host [N] i64), for the batch that trains next, its kernels on `stream` (the
    // device's; the batch before was enqueued there). An id outside [0, rows) is an Error naming
    // the table.
    void prefetch(const Tensor& ids, Tensor& slots, Stream& stream = Stream::cpu());
    // The prefetch pipeline: on another thread while the batch of the latest prefetch() trains,
    // makes rows of the next batch resident without touching that batch's rows, its overflow
    // or what its training reads and writes (its slots, dirty marks and the kernels' tensors,
    // which do not grow here). The next batch's prefetch() then finds them; it fills and
    // counts whatever this left out. Not concurrent with prefetch, flush or checkpoints.
    void prefetch_ahead(const Tensor& ids);
    // 2D parallelism (sharding.replica_groups): rows the batch of the latest prefetch() updates
    // besides its own (rows another replica's batch looked up), made resident and locked with
    // the batch's rows, their slots into `slots` (host [N] i64); not counted as lookups. May
    // run beside prefetch_ahead. Read the kernels' tensors after it (the overflow may grow).
    void place_updated(const Tensor& ids, Tensor& slots, Stream& stream = Stream::cpu());
    // The optimizer changed the rows of the latest prefetch (the batch's backward was enqueued
    // on `stream`).
    void mark_updated(Stream& stream = Stream::cpu());
    // Writes every changed row back to the store (once the updates are done); the cache keeps
    // them.
    void flush();
    // Rows `rows` (shard rows) back to their initial weights with a zero optimizer state,
    // wherever they are (a managed-collision eviction: TorchRec's mc_embedding_modules.evict),
    // once the updates before are done; their LFU counts start again.
    void reset_rows(const std::vector<int64_t>& rows);

    // ---- checkpoints (flush first) ----
    // The rows not at their initial value, ascending.
    std::vector<int64_t> stored_rows() const { return store_->stored_rows(); }

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

    // From now on a row's initial value comes from fn(shard row, weight [1, cols] of the table's
    // dtype) instead of the table's initializer (the optimizer state still starts at its start):
    // after reset(), a model read row by row as the lookups need it (eval of a quantized model).
    void set_initial_rows(std::function<void(int64_t, Tensor&)> fn) {
        initial_rows_ = std::move(fn);
    }

    // Rows `rows` (ascending) from weight [n, cols] and states into the store (after reset).
    void write_rows(const std::vector<int64_t>& rows,
                    const Tensor& weight,
                    const std::vector<Tensor>& states);

    const Layout& layout() const { return layout_; }

    int64_t slots() const { return slots_; }

    const CacheStats& stats() const { return stats_; }

    // Bytes held on the cache's device: the slots with their state, and the overflow area.
    int64_t cache_bytes() const;

    int64_t disk_bytes() const { return store_->disk_bytes(); }

    // The disk its rows take once every one of them has been written (0: a host-memory tier).
    int64_t full_disk_bytes() const { return store_->full_disk_bytes(); }

    // Host memory the store's rows (or its index) take.
    int64_t store_host_bytes() const { return store_->host_bytes(); }

private:
    // Where rows move on a CUDA device: a stream with its staging of slots and payloads.
    struct Mover {
        Stream* stream = nullptr;
        std::unique_ptr<HostToDeviceStager> stager;
        Tensor slots_buf, payloads_buf;
    };

    float state1_initial() const;
    void unpack(const char* payloads, int64_t n, Tensor& weight, std::vector<Tensor>& states) const;
    void init_payload(int64_t row, char* payload);
    void ensure_capacity(int64_t capacity, Stream& stream);
    void check_ids(const Tensor& ids) const;
    enum class Pass { kBatch, kUpdated, kAhead };
    void place(const int64_t* ids, int64_t n, int64_t* out, Pass pass, Mover& mover);
    int64_t set_of(int64_t row) const;
    int64_t way_of(int64_t row, int64_t set) const;  // the row's slot among the set's, or -1
    int64_t victim(int64_t set) const;               // an unlocked way of the set, or -1

    void count(int64_t row) {  // lfu: one more lookup of the row
        if (!row_count_.empty()) {
            uint32_t& c = row_count_[static_cast<size_t>(row)];
            c += c != UINT32_MAX ? 1u : 0u;
        }
    }

    void retire_overflow(Mover& mover);  // overflow rows back to the store, the area emptied
    // The rows at `slots` out to payloads (host), and payloads (host) into `slots`.
    void move_out(const std::vector<int64_t>& slots, std::vector<char>& payloads, Mover& mover);
    void move_in(const std::vector<int64_t>& slots,
                 const std::vector<char>& payloads,
                 Mover& mover);
    // Changed rows at `slots` back to the store as `rows`.
    void write_back(const std::vector<int64_t>& rows,
                    const std::vector<int64_t>& slots,
                    Mover& mover);

    Layout layout_;
    kernels::FusedOptimizerParams optim_;
    CacheAlgorithm algorithm_;
    DType slot_dtype_;  // cache precision (the store keeps layout_.dtype)
    std::unique_ptr<RowStore> store_;
    int64_t payload_bytes_ = 0;
    int64_t ways_ = 1, sets_ = 1, slots_ = 1, capacity_ = 0;
    std::vector<int64_t> slot_row_;    // -1: empty
    std::vector<int64_t> slot_tick_;   // the batch (tick) that last used it
    std::vector<int64_t> slot_batch_;  // the prefetch() that put it in batch_slots_
    // lfu: ids looked up per row of the shard, kept while the row is out of the cache too
    // (FBGEMM's lfu_state), saturating; empty for lru.
    std::vector<uint32_t> row_count_;
    std::vector<uint8_t> slot_dirty_;
    std::vector<int64_t> overflow_rows_;
    std::unordered_map<int64_t, int64_t> overflow_slot_;
    std::vector<uint8_t> overflow_dirty_;
    std::vector<int64_t> batch_slots_;  // distinct slots of the latest prefetch
    int64_t tick_ = 0;                  // the batch of the latest prefetch()
    int64_t lock_from_ = 0;             // slots used by batches from this tick on are not evicted
    int64_t batch_gen_ = 0;
    CacheStats stats_;
    // Scratch of a prefetch: evicted rows and their slots, the rows to fill and their payloads.
    std::vector<int64_t> evict_rows_, evict_slots_, fill_rows_, fill_slots_, read_rows_;
    std::vector<size_t> read_at_;
    std::vector<char> evict_buf_, fill_buf_, read_buf_;
    Tensor init_row_;  // [1, cols] of the table's dtype: a row's initial value
    std::function<void(int64_t, Tensor&)> initial_rows_;  // set_initial_rows; empty: initializer
    // On a CUDA device: the batch's moves (prefetch's stream), those of prefetch_ahead and of
    // flush on streams of their own; the ahead moves done (ahead_done_) before the batch's
    // kernels, the batch before updated (prefetched_) before the ahead moves, every update done
    // (updated_) before a flush.
    Mover batch_mover_, ahead_mover_, flush_mover_;
    std::unique_ptr<Stream> ahead_stream_, flush_stream_;
    Event prefetched_, updated_, ahead_done_;
    bool ahead_pending_ = false;
    std::mutex place_mutex_;  // place_updated beside prefetch_ahead
};

}  // namespace shardrec
