#include "engine/modules/cached_embedding_shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>

#include "engine/core/error.h"
#include "engine/modules/embedding_config.h"
#include "kernels/cache_rows.h"

namespace shardrec {

namespace {

constexpr int64_t kMaxWays = 32;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: spreads nearby ids over the sets
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

bool state1_per_row(const kernels::FusedOptimizerParams& o) {
    return o.type == kernels::OptimType::kExactRowWiseAdagrad;
}

}  // namespace

std::string CachedEmbeddingShard::owner(const Layout& l) {
    return fmt::format("table '{}' rows [{}, {}) columns [{}, {}) on rank {}", l.table,
                       l.row_offset, l.row_offset + l.rows, l.col_offset, l.col_offset + l.cols,
                       l.rank);
}

int64_t CachedEmbeddingShard::payload_bytes(const Layout& layout,
                                            const kernels::FusedOptimizerParams& optim) {
    const int64_t n = kernels::optim_num_states(optim.type);
    const int64_t s1 = n >= 1 ? (state1_per_row(optim) ? 1 : layout.cols) : 0;
    const int64_t s2 = n >= 2 ? layout.cols : 0;
    return std::max<int64_t>(1, kernels::cache_payload_bytes(layout.cols, layout.dtype, s1, s2));
}

CachedEmbeddingShard::CachedEmbeddingShard(const Layout& layout,
                                           const CacheParams& cache,
                                           const kernels::FusedOptimizerParams& optim,
                                           std::unique_ptr<RowStore> store)
    : layout_(layout),
      optim_(optim),
      algorithm_(cache.algorithm),
      slot_dtype_(cache.precision.value_or(layout.dtype)),
      store_(std::move(store)),
      payload_bytes_(payload_bytes(layout, optim)),
      prefetched_(layout.device),
      updated_(layout.device),
      ahead_done_(layout.device) {
    SR_CHECK(store_ != nullptr && store_->rows() == layout.rows &&
                 store_->payload_bytes() == payload_bytes_,
             "{}: its store does not hold {} payloads of {} bytes", owner(layout), layout.rows,
             payload_bytes_);
    const auto wanted = static_cast<int64_t>(
        std::ceil(cache.load_factor * static_cast<double>(std::max<int64_t>(layout.rows, 1))));
    ways_ = std::min(kMaxWays, std::max<int64_t>(wanted, 1));
    sets_ = (std::max<int64_t>(wanted, 1) + ways_ - 1) / ways_;
    slots_ = sets_ * ways_;
    slot_row_.assign(static_cast<size_t>(slots_), -1);
    slot_tick_.assign(static_cast<size_t>(slots_), 0);
    slot_batch_.assign(static_cast<size_t>(slots_), 0);
    if (algorithm_ == CacheAlgorithm::kLfu)
        row_count_.assign(static_cast<size_t>(layout.rows), 0);
    slot_dirty_.assign(static_cast<size_t>(slots_), 0);
    init_row_ = Tensor::empty({1, layout.cols}, layout.dtype);
    if (layout.device.is_cuda()) {
        ahead_stream_ = std::make_unique<Stream>(layout.device);
        flush_stream_ = std::make_unique<Stream>(layout.device);
    }
    ahead_mover_.stream = ahead_stream_ ? ahead_stream_.get() : &Stream::cpu();
    flush_mover_.stream = flush_stream_ ? flush_stream_.get() : &Stream::cpu();
    batch_mover_.stream = &Stream::cpu();
    ensure_capacity(slots_, *flush_mover_.stream);
    flush_mover_.stream->synchronize();
}

void CachedEmbeddingShard::ensure_capacity(int64_t capacity, Stream& stream) {
    if (capacity <= capacity_)
        return;
    // Grown by half again at least, so a growing overflow reallocates O(log) times.
    const int64_t grown = capacity_ == 0 ? capacity : std::max(capacity, capacity_ + capacity_ / 2);
    const int64_t cols = layout_.cols;
    const Device device = layout_.device;
    auto regrow = [&](Tensor& t, const Shape& shape, DType dtype) {
        Tensor fresh = Tensor::empty(shape, dtype, device);
        if (t.defined())
            copy_async(fresh.data_ptr(), device, t.data_ptr(), device, t.nbytes(), stream);
        t = fresh;
    };
    regrow(weights, {grown, cols}, slot_dtype_);
    const int n = kernels::optim_num_states(optim_.type);
    if (n >= 1)
        regrow(state1, state1_per_row(optim_) ? Shape{grown} : Shape{grown, cols}, DType::kF32);
    if (n >= 2)
        regrow(state2, {grown, cols}, DType::kF32);
    capacity_ = grown;
    table_offsets = Tensor::from_vector<int64_t>({0, capacity_}).to(device);
}

int64_t CachedEmbeddingShard::cache_bytes() const {
    int64_t n = static_cast<int64_t>(weights.nbytes());
    for (const Tensor* s : {&state1, &state2})
        n += s->defined() ? static_cast<int64_t>(s->nbytes()) : 0;
    // The index (row, tick, batch, dirty a slot) and LFU's count of every row.
    return n + slots_ * 25 + static_cast<int64_t>(row_count_.size()) * 4;
}

// ---- moving rows ----

void CachedEmbeddingShard::move_out(const std::vector<int64_t>& slots,
                                    std::vector<char>& payloads,
                                    Mover& m) {
    const auto n = static_cast<int64_t>(slots.size());
    payloads.resize(static_cast<size_t>(n * payload_bytes_));
    if (n == 0)
        return;
    Tensor host_slots = Tensor::from_blob(const_cast<int64_t*>(slots.data()), {n}, DType::kI64);
    Tensor host_payloads = Tensor::from_blob(payloads.data(), {n * payload_bytes_}, DType::kU8);
    Stream& stream = *m.stream;
    if (layout_.device.is_cpu()) {
        kernels::cache_rows_pack(weights, state1.defined() ? &state1 : nullptr,
                                 state2.defined() ? &state2 : nullptr, host_slots, layout_.dtype,
                                 host_payloads, stream);
        return;
    }
    if (!m.stager)
        m.stager = std::make_unique<HostToDeviceStager>(layout_.device);
    m.stager->begin(HostToDeviceStager::padded_bytes(host_slots));
    const Tensor dev_slots = m.stager->copy(m.slots_buf, host_slots);
    m.stager->end(stream);
    Tensor dev_payloads =
        grow_prefix(m.payloads_buf, n * payload_bytes_, DType::kU8, layout_.device);
    kernels::cache_rows_pack(weights, state1.defined() ? &state1 : nullptr,
                             state2.defined() ? &state2 : nullptr, dev_slots, layout_.dtype,
                             dev_payloads, stream);
    copy_async(payloads.data(), Device::cpu(), dev_payloads.data_ptr(), layout_.device,
               payloads.size(), stream);
    stream.synchronize();  // the store writes them next
}

void CachedEmbeddingShard::move_in(const std::vector<int64_t>& slots,
                                   const std::vector<char>& payloads,
                                   Mover& m) {
    const auto n = static_cast<int64_t>(slots.size());
    if (n == 0)
        return;
    Tensor host_slots = Tensor::from_blob(const_cast<int64_t*>(slots.data()), {n}, DType::kI64);
    Tensor host_payloads =
        Tensor::from_blob(const_cast<char*>(payloads.data()), {n * payload_bytes_}, DType::kU8);
    Stream& stream = *m.stream;
    if (layout_.device.is_cpu()) {
        kernels::cache_rows_unpack(host_payloads, host_slots, layout_.dtype, weights,
                                   state1.defined() ? &state1 : nullptr,
                                   state2.defined() ? &state2 : nullptr, stream);
        return;
    }
    // Staged through pinned memory: the host's buffers are free again on return.
    if (!m.stager)
        m.stager = std::make_unique<HostToDeviceStager>(layout_.device);
    m.stager->begin(HostToDeviceStager::padded_bytes(host_slots) +
                    HostToDeviceStager::padded_bytes(host_payloads));
    const Tensor dev_slots = m.stager->copy(m.slots_buf, host_slots);
    const Tensor dev_payloads = m.stager->copy(m.payloads_buf, host_payloads);
    m.stager->end(stream);
    kernels::cache_rows_unpack(dev_payloads, dev_slots, layout_.dtype, weights,
                               state1.defined() ? &state1 : nullptr,
                               state2.defined() ? &state2 : nullptr, stream);
}

void CachedEmbeddingShard::write_back(const std::vector<int64_t>& rows,
                                      const std::vector<int64_t>& slots,
                                      Mover& m) {
    move_out(slots, evict_buf_, m);
    store_->write(rows.data(), static_cast<int64_t>(rows.size()), evict_buf_.data());
    stats_.bytes_out += static_cast<int64_t>(rows.size()) * payload_bytes_;
}

float CachedEmbeddingShard::state1_initial() const {
    // As kernels::make_optimizer_states: Adagrad's sum of squares starts at
    // initial_accumulator_value, Adam's moments at 0.
    const bool adagrad = optim_.type == kernels::OptimType::kExactAdagrad ||
                         optim_.type == kernels::OptimType::kExactRowWiseAdagrad;
    return adagrad ? optim_.initial_accumulator_value : 0.f;
}

void CachedEmbeddingShard::init_payload(int64_t row, char* p) {
    Tensor& w = init_row_;
    if (initial_rows_)
        initial_rows_(row, w);
    else
        init_embedding_rows(w, layout_.seed, layout_.table_index, layout_.row_offset + row,
                            layout_.col_offset, layout_.num_embeddings);
    std::memcpy(p, w.data_ptr(), w.nbytes());
    p += w.nbytes();
    if (state1.defined()) {
        const float v = state1_initial();
        for (int64_t c = 0; c < (state1_per_row(optim_) ? 1 : layout_.cols); ++c, p += 4)
            std::memcpy(p, &v, 4);
    }
    if (state2.defined())
        std::memset(p, 0, static_cast<size_t>(layout_.cols) * 4);
}

// ---- the cache ----

int64_t CachedEmbeddingShard::set_of(int64_t row) const {
    return static_cast<int64_t>(mix(static_cast<uint64_t>(row)) % static_cast<uint64_t>(sets_));
}

int64_t CachedEmbeddingShard::way_of(int64_t row, int64_t set) const {
    for (int64_t s = set * ways_; s < (set + 1) * ways_; ++s) {
        if (slot_row_[static_cast<size_t>(s)] == row)
            return s;
    }
    return -1;
}

int64_t CachedEmbeddingShard::victim(int64_t set) const {
    int64_t best = -1;
    for (int64_t s = set * ways_; s < (set + 1) * ways_; ++s) {
        if (slot_row_[static_cast<size_t>(s)] < 0)
            return s;
        if (slot_tick_[static_cast<size_t>(s)] >= lock_from_)
            continue;  // locked: a batch in flight uses it
        if (best < 0) {
            best = s;
            continue;
        }
        const auto i = static_cast<size_t>(s), b = static_cast<size_t>(best);
        const bool better =
            algorithm_ == CacheAlgorithm::kLru
                ? slot_tick_[i] < slot_tick_[b]
                : std::make_pair(row_count_[static_cast<size_t>(slot_row_[i])], slot_tick_[i]) <
                      std::make_pair(row_count_[static_cast<size_t>(slot_row_[b])], slot_tick_[b]);
        if (better)
            best = s;
    }
    return best;
}

void CachedEmbeddingShard::retire_overflow(Mover& mover) {
    if (overflow_rows_.empty())
        return;
    evict_rows_.clear();
    evict_slots_.clear();
    for (size_t i = 0; i < overflow_rows_.size(); ++i) {
        if (overflow_dirty_[i]) {
            evict_rows_.push_back(overflow_rows_[i]);
            evict_slots_.push_back(slots_ + static_cast<int64_t>(i));
        }
    }
    write_back(evict_rows_, evict_slots_, mover);
    overflow_rows_.clear();
    overflow_slot_.clear();
    overflow_dirty_.clear();
}

void CachedEmbeddingShard::prefetch(const Tensor& ids, Tensor& slots, Stream& stream) {
    SR_CHECK(stream.device() == layout_.device,
             "{}: its cache is on {}, and its prefetch was given a stream of {}", owner(layout_),
             layout_.device.str(), stream.device().str());
    check_ids(ids);
    if (ahead_pending_) {  // the batch's kernels after the rows moved ahead
        ahead_done_.wait(stream);
        ahead_pending_ = false;
    }
    batch_mover_.stream = &stream;
    retire_overflow(batch_mover_);
    ++tick_;
    lock_from_ = tick_;  // the batch before has trained: only this one's rows are locked
    ++batch_gen_;
    batch_slots_.clear();
    slots = grow_prefix(slots, ids.numel(), DType::kI64);
    place(ids.data<int64_t>(), ids.numel(), slots.data<int64_t>(), Pass::kBatch, batch_mover_);
    prefetched_.record(stream);
}

void CachedEmbeddingShard::prefetch_ahead(const Tensor& ids) {
    check_ids(ids);
    // The rows it may evict were updated by the batch before, enqueued ahead of the prefetch.
    prefetched_.synchronize();
    const std::lock_guard<std::mutex> lock(place_mutex_);
    place(ids.data<int64_t>(), ids.numel(), nullptr, Pass::kAhead, ahead_mover_);
    ahead_done_.record(*ahead_mover_.stream);
    ahead_pending_ = true;
}

void CachedEmbeddingShard::place_updated(const Tensor& ids, Tensor& slots, Stream& stream) {
    SR_CHECK(layout_.device.is_cpu(),
             "{}: rows besides the batch's are placed on the CPU only (2D parallelism runs there)",
             owner(layout_));
    check_ids(ids);
    batch_mover_.stream = &stream;
    slots = grow_prefix(slots, ids.numel(), DType::kI64);
    const std::lock_guard<std::mutex> lock(place_mutex_);  // a prefetch_ahead may run beside it
    place(ids.data<int64_t>(), ids.numel(), slots.data<int64_t>(), Pass::kUpdated, batch_mover_);
}

void CachedEmbeddingShard::check_ids(const Tensor& ids) const {
    SR_CHECK(ids.dtype() == DType::kI64 && ids.dim() == 1 && ids.device().is_cpu(),
             "cached table '{}': ids must be a host [N] i64 tensor, got {}", layout_.table,
             ids.str());
    const int64_t* id = ids.data<int64_t>();
    for (int64_t i = 0; i < ids.numel(); ++i) {
        SR_CHECK(id[i] >= 0 && id[i] < layout_.rows,
                 "table '{}': id {} is outside its shard's rows [0, {}) (rows [{}, {}) of the "
                 "table, on rank {})",
                 layout_.table, id[i], layout_.rows, layout_.row_offset,
                 layout_.row_offset + layout_.rows, layout_.rank);
    }
}

// kBatch: the batch's own pass (prefetch), slots into out, overflow when a set is full, the
// batch's counters. kUpdated: more rows of the batch (place_updated), as kBatch but not counted
// as lookups. kAhead (out == null): ahead of the batch (prefetch_ahead) while the one before
// (tick_) may still train: rows get the next tick, the batch before's and the overflow area
// are left alone, a full set leaves the row to the batch's own pass.
void CachedEmbeddingShard::place(
    const int64_t* id, int64_t n, int64_t* out, Pass pass, Mover& mover) {
    const bool ahead = pass == Pass::kAhead, looked_up = pass == Pass::kBatch;
    const size_t batch_rows = batch_slots_.size();
    const int64_t tick = ahead ? tick_ + 1 : tick_;
    evict_rows_.clear();
    evict_slots_.clear();
    fill_rows_.clear();
    fill_slots_.clear();
    for (int64_t i = 0; i < n; ++i) {
        const int64_t row = id[i];
        const int64_t set = set_of(row);
        int64_t slot = way_of(row, set);
        if (slot >= 0) {
            const auto s = static_cast<size_t>(slot);
            slot_tick_[s] = std::max(slot_tick_[s], tick);
            if (!ahead) {
                if (slot_batch_[s] != batch_gen_) {
                    slot_batch_[s] = batch_gen_;
                    batch_slots_.push_back(slot);
                }
                if (looked_up)
                    count(row);
                out[i] = slot;
            }
            continue;
        }
        const auto over = overflow_slot_.find(row);
        if (over != overflow_slot_.end()) {
            if (!ahead) {
                out[i] = over->second;
                if (looked_up)
                    count(row);
            }
            continue;  // ahead: the batch before may still update it
        }
        slot = victim(set);
        if (slot < 0 && ahead)
            continue;  // every way locked: the batch's own pass places it
        ++stats_.misses;
        if (slot < 0) {
            slot = slots_ + static_cast<int64_t>(overflow_rows_.size());
            overflow_rows_.push_back(row);
            overflow_dirty_.push_back(0);
            overflow_slot_.emplace(row, slot);
            ensure_capacity(slot + 1, *mover.stream);
            ++stats_.overflow;
        } else {
            const auto s = static_cast<size_t>(slot);
            if (slot_row_[s] >= 0 && slot_dirty_[s]) {  // a slot is evicted once a pass: locked
                evict_rows_.push_back(slot_row_[s]);
                evict_slots_.push_back(slot);
            }
            slot_row_[s] = row;
            slot_tick_[s] = tick;

            slot_dirty_[s] = 0;
            if (!ahead)
                slot_batch_[s] = batch_gen_;
        }
        if (!ahead) {  // the batch's own pass counts its ids
            batch_slots_.push_back(slot);
            out[i] = slot;
            if (looked_up)
                count(row);
        }
        fill_rows_.push_back(row);
        fill_slots_.push_back(slot);
    }
    if (!ahead) {
        stats_.lookups += looked_up ? n : 0;
        stats_.unique_rows += static_cast<int64_t>(batch_slots_.size() - batch_rows);
    }
    // Write-backs before the reads: a row evicted above may be read back by a later miss, and
    // the evicted slots are read before the fills overwrite them.
    write_back(evict_rows_, evict_slots_, mover);
    // The fills' payloads: stored rows read in row order (the file front to back), the others
    // at their initial value.
    const auto pb = static_cast<size_t>(payload_bytes_);
    fill_buf_.resize(fill_rows_.size() * pb);
    read_rows_.clear();
    read_at_.clear();
    for (size_t i = 0; i < fill_rows_.size(); ++i) {
        if (store_->stored(fill_rows_[i])) {
            read_rows_.push_back(fill_rows_[i]);
            read_at_.push_back(i);
        } else {
            init_payload(fill_rows_[i], fill_buf_.data() + i * pb);
        }
    }
    if (!read_rows_.empty()) {
        std::vector<size_t> order(read_rows_.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return read_rows_[a] < read_rows_[b]; });
        std::vector<int64_t> sorted(order.size());
        for (size_t i = 0; i < order.size(); ++i)
            sorted[i] = read_rows_[order[i]];
        read_buf_.resize(sorted.size() * pb);
        store_->read(sorted.data(), static_cast<int64_t>(sorted.size()), read_buf_.data());
        for (size_t i = 0; i < order.size(); ++i)
            std::memcpy(fill_buf_.data() + read_at_[order[i]] * pb, read_buf_.data() + i * pb, pb);
        stats_.bytes_in += static_cast<int64_t>(sorted.size()) * payload_bytes_;
    }
    move_in(fill_slots_, fill_buf_, mover);
}

void CachedEmbeddingShard::mark_updated(Stream& stream) {
    for (const int64_t slot : batch_slots_) {
        if (slot < slots_)
            slot_dirty_[static_cast<size_t>(slot)] = 1;
        else
            overflow_dirty_[static_cast<size_t>(slot - slots_)] = 1;
    }
    updated_.record(stream);
}

void CachedEmbeddingShard::flush() {
    prefetched_.synchronize();
    updated_.synchronize();
    if (ahead_pending_)
        ahead_done_.synchronize();
    evict_rows_.clear();
    evict_slots_.clear();
    for (int64_t s = 0; s < slots_; ++s) {
        if (slot_row_[static_cast<size_t>(s)] >= 0 && slot_dirty_[static_cast<size_t>(s)]) {
            evict_rows_.push_back(slot_row_[static_cast<size_t>(s)]);
            evict_slots_.push_back(s);
            slot_dirty_[static_cast<size_t>(s)] = 0;
        }
    }
    for (size_t i = 0; i < overflow_rows_.size(); ++i) {
        if (overflow_dirty_[i]) {
            evict_rows_.push_back(overflow_rows_[i]);
            evict_slots_.push_back(slots_ + static_cast<int64_t>(i));
            overflow_dirty_[i] = 0;
        }
    }
    write_back(evict_rows_, evict_slots_, flush_mover_);
}

void CachedEmbeddingShard::reset_rows(const std::vector<int64_t>& rows) {
    prefetched_.synchronize();
    updated_.synchronize();
    if (ahead_pending_)
        ahead_done_.synchronize();
    const size_t weight_bytes = static_cast<size_t>(layout_.cols) * dtype_size(layout_.dtype);
    std::vector<int64_t> in_cache, in_store;  // slots, rows
    std::vector<char> cache_payloads, store_payloads;
    for (const int64_t row : rows) {
        SR_CHECK(row >= 0 && row < layout_.rows, "{}: row {} reset, outside the shard",
                 owner(layout_), row);
        int64_t slot = way_of(row, set_of(row));
        const auto over = overflow_slot_.find(row);
        if (slot < 0 && over != overflow_slot_.end())
            slot = over->second;
        std::vector<char>& payloads = slot >= 0 ? cache_payloads : store_payloads;
        (slot >= 0 ? in_cache : in_store).push_back(slot >= 0 ? slot : row);
        payloads.resize(payloads.size() + static_cast<size_t>(payload_bytes_));
        char* p = payloads.data() + payloads.size() - static_cast<size_t>(payload_bytes_);
        init_payload(row, p);
        std::memset(p + weight_bytes, 0, static_cast<size_t>(payload_bytes_) - weight_bytes);
        if (slot >= slots_)
            overflow_dirty_[static_cast<size_t>(slot - slots_)] = 1;
        else if (slot >= 0)
            slot_dirty_[static_cast<size_t>(slot)] = 1;  // the store's copy is the old one
        if (!row_count_.empty())
            row_count_[static_cast<size_t>(row)] = 0;
    }
    move_in(in_cache, cache_payloads, flush_mover_);
    flush_mover_.stream->synchronize();  // done before the next batch's kernels
    if (!in_store.empty())
        store_->write(in_store.data(), static_cast<int64_t>(in_store.size()),
                      store_payloads.data());
}

// ---- checkpoints ----

// n payloads (the store's layout) into weight [n, cols] and the optimizer states.
void CachedEmbeddingShard::unpack(const char* payloads,
                                  int64_t n,
                                  Tensor& weight,
                                  std::vector<Tensor>& states) const {
    weight = Tensor::empty({n, layout_.cols}, layout_.dtype);
    states.clear();
    for (const Tensor* s : {&state1, &state2}) {
        if (s->defined())
            states.push_back(
                Tensor::empty(s->dim() == 1 ? Shape{n} : Shape{n, layout_.cols}, DType::kF32));
    }
    const size_t w = static_cast<size_t>(layout_.cols) * dtype_size(layout_.dtype);
    for (int64_t i = 0; i < n; ++i) {
        const char* p = payloads + i * payload_bytes_;
        std::memcpy(static_cast<char*>(weight.data_ptr()) + i * static_cast<int64_t>(w), p, w);
        p += w;
        for (Tensor& s : states) {
            const size_t b = s.dim() == 1 ? 4 : static_cast<size_t>(layout_.cols) * 4;
            std::memcpy(static_cast<char*>(s.data_ptr()) + i * static_cast<int64_t>(b), p, b);
            p += b;
        }
    }
}

void CachedEmbeddingShard::read_rows(const std::vector<int64_t>& rows,
                                     Tensor& weight,
                                     std::vector<Tensor>& states) {
    const auto n = static_cast<int64_t>(rows.size());
    const int64_t pb = payload_bytes_;
    std::vector<char> payloads(static_cast<size_t>(n * pb));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t row = rows[static_cast<size_t>(i)];
        if (store_->stored(row))
            store_->read(&row, 1, payloads.data() + i * pb);
        else
            init_payload(row, payloads.data() + i * pb);
    }
    unpack(payloads.data(), n, weight, states);
}

void CachedEmbeddingShard::scan_stored(
    int64_t chunk,
    const std::function<
        void(const std::vector<int64_t>&, const Tensor&, const std::vector<Tensor>&)>& fn) {
    Tensor weight;
    std::vector<Tensor> states;
    store_->scan(chunk, [&](const std::vector<int64_t>& rows, const char* payloads) {
        unpack(payloads, static_cast<int64_t>(rows.size()), weight, states);
        fn(rows, weight, states);
    });
}

void CachedEmbeddingShard::reset() {
    std::fill(slot_row_.begin(), slot_row_.end(), -1);
    std::fill(slot_dirty_.begin(), slot_dirty_.end(), 0);
    std::fill(slot_tick_.begin(), slot_tick_.end(), 0);
    std::fill(row_count_.begin(), row_count_.end(), 0);
    overflow_rows_.clear();
    overflow_slot_.clear();
    overflow_dirty_.clear();
    batch_slots_.clear();
    store_->clear();
}

void CachedEmbeddingShard::write_rows(const std::vector<int64_t>& rows,
                                      const Tensor& weight,
                                      const std::vector<Tensor>& states) {
    const auto n = static_cast<int64_t>(rows.size());
    const int64_t pb = payload_bytes_;
    SR_CHECK(weight.shape() == (Shape{n, layout_.cols}) && weight.dtype() == layout_.dtype,
             "key_value table '{}': {} rows written from {}", layout_.table, n, weight.str());
    std::vector<char> buf(static_cast<size_t>(n * pb));
    const size_t w = static_cast<size_t>(layout_.cols) * dtype_size(layout_.dtype);
    for (int64_t i = 0; i < n; ++i) {
        char* p = buf.data() + i * pb;
        std::memcpy(p, static_cast<const char*>(weight.data_ptr()) + i * static_cast<int64_t>(w),
                    w);
        p += w;
        for (const Tensor& s : states) {
            const size_t b = s.dim() == 1 ? 4 : static_cast<size_t>(layout_.cols) * 4;
            std::memcpy(p, static_cast<const char*>(s.data_ptr()) + i * static_cast<int64_t>(b), b);
            p += b;
        }
    }
    store_->write(rows.data(), n, buf.data());
}

}  // namespace shardrec
