#include "engine/distributed/quantized_row_fetch.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/core/error.h"

namespace shardrec {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Segment sizes -> their offsets (one more: the total).
std::vector<int64_t> prefix(const std::vector<int64_t>& sizes) {
    std::vector<int64_t> at(sizes.size() + 1, 0);
    for (size_t r = 0; r < sizes.size(); ++r)
        at[r + 1] = at[r] + sizes[r];
    return at;
}

}  // namespace

QuantizedRowFetch::QuantizedRowFetch(std::shared_ptr<comm::ProcessGroup> pg,
                                     std::vector<Table> tables,
                                     std::vector<Feature> features)
    : pg_(std::move(pg)), tables_(std::move(tables)), features_(std::move(features)) {
    for (Table& t : tables_) {
        std::sort(t.shards.begin(), t.shards.end(),
                  [](const Shard& a, const Shard& b) {       // an empty shard before the one it
                      return a.row_offset < b.row_offset ||  // shares its offset with
                             (a.row_offset == b.row_offset && a.rows < b.rows);
                  });
        std::vector<int64_t> first;
        int64_t next = 0;
        for (const Shard& s : t.shards) {
            SR_CHECK(s.row_offset == next && s.rank >= 0 && s.rank < pg_->size(),
                     "table '{}': its row shards must cover rows 0..{} in order on ranks of the "
                     "world of {}; a shard at row {} on rank {} does not follow row {}",
                     t.name, t.num_embeddings, pg_->size(), s.row_offset, s.rank, next);
            const int64_t bytes = s.rows * kernels::quant_row_bytes(t.type, t.dim);
            SR_CHECK(s.rank != pg_->rank() || s.rows == 0 ||
                         (s.stored.dtype() == DType::kU8 && s.stored.numel() == bytes),
                     "table '{}': the stored rows of its shard at row {} are {}, not u8[{}]",
                     t.name, s.row_offset, s.stored.str(), bytes);
            first.push_back(s.row_offset);
            next += s.rows;
        }
        SR_CHECK(next == t.num_embeddings, "table '{}': its row shards cover {} of its {} rows",
                 t.name, next, t.num_embeddings);
        first_rows_.push_back(std::move(first));
    }
}

int64_t QuantizedRowFetch::row_bytes(int64_t table) const {
    const Table& t = tables_[static_cast<size_t>(table)];
    return kernels::quant_row_bytes(t.type, t.dim);
}

int64_t QuantizedRowFetch::stored_bytes() const {
    int64_t n = 0;
    for (const Table& t : tables_) {
        for (const Shard& s : t.shards)
            n += s.rank == pg_->rank() ? static_cast<int64_t>(s.stored.nbytes()) : 0;
    }
    return n;
}

void QuantizedRowFetch::forward(const KeyedJaggedTensor& kjt, Tensor& out) {
    const int world = pg_->size();
    const int64_t B = kjt.stride();
    const int64_t* off = kjt.offsets().data<int64_t>();
    const int64_t* ids = kjt.values().data<int64_t>();
    SR_CHECK(!kjt.variable_stride_per_key() && out.dtype() == DType::kF32 && out.dim() == 2 &&
                 out.size(0) == B,
             "QuantizedRowFetch: the features need a fixed batch of {} and out f32 [{}, cols], "
             "got {}",
             B, B, out.str());

    // 1. Where each id's row lives: the shard (dest_) and the request's place in its rank's
    //    segment; the rows come back to reply_at_ in the order they were asked for.
    const int64_t n = kjt.values().numel();
    dest_.assign(static_cast<size_t>(n), -1);
    reply_at_.assign(static_cast<size_t>(n), 0);
    std::vector<int64_t> asked(static_cast<size_t>(world), 0), reply_bytes(asked);
    std::vector<int64_t> key(features_.size());
    for (size_t f = 0; f < features_.size(); ++f) {
        const Feature& feat = features_[f];
        key[f] = kjt.key_index(feat.name);
        const Table& table = tables_[static_cast<size_t>(feat.table)];
        const std::vector<int64_t>& first = first_rows_[static_cast<size_t>(feat.table)];
        const int64_t bytes = row_bytes(feat.table);
        for (int64_t i = off[key[f] * B]; i < off[(key[f] + 1) * B]; ++i) {
            SR_CHECK(ids[i] >= 0 && ids[i] < table.num_embeddings,
                     "feature '{}': id {} is outside the {} rows of table '{}'", feat.name, ids[i],
                     table.num_embeddings, table.name);
            const auto s = std::upper_bound(first.begin(), first.end(), ids[i]) - first.begin() - 1;
            const int r = table.shards[static_cast<size_t>(s)].rank;
            dest_[static_cast<size_t>(i)] = s;
            reply_at_[static_cast<size_t>(i)] = reply_bytes[static_cast<size_t>(r)];
            reply_bytes[static_cast<size_t>(r)] += bytes;
            ++asked[static_cast<size_t>(r)];
        }
    }

    // 2. The requests, (table, row) per id, grouped by rank in the batch's order.
    std::vector<int64_t> request_at = prefix(asked), fill(request_at.begin(), request_at.end() - 1);
    requests_ = grow_prefix(requests_, 2 * request_at.back(), DType::kI64);
    int64_t* req = requests_.data<int64_t>();
    for (size_t f = 0; f < features_.size(); ++f) {
        const Table& table = tables_[static_cast<size_t>(features_[f].table)];
        for (int64_t i = off[key[f] * B]; i < off[(key[f] + 1) * B]; ++i) {
            const int r = table.shards[static_cast<size_t>(dest_[static_cast<size_t>(i)])].rank;
            int64_t& at = fill[static_cast<size_t>(r)];
            req[2 * at] = features_[f].table;
            req[2 * at + 1] = ids[i];
            ++at;
        }
    }
    Tensor counts = Tensor::from_vector<int64_t>(asked);
    Tensor got_counts = Tensor::empty({world}, DType::kI64);
    const std::vector<int64_t> ones(static_cast<size_t>(world), 1);
    pg_->all_to_all_v(counts, ones, got_counts, ones).wait();
    const std::vector<int64_t> served(got_counts.data<int64_t>(),
                                      got_counts.data<int64_t>() + world);
    std::vector<int64_t> send_splits(asked), recv_splits(served);
    for (int r = 0; r < world; ++r) {
        send_splits[static_cast<size_t>(r)] *= 2;
        recv_splits[static_cast<size_t>(r)] *= 2;
    }
    const std::vector<int64_t> served_at = prefix(served);
    received_requests_ = grow_prefix(received_requests_, 2 * served_at.back(), DType::kI64);
    pg_->all_to_all_v(requests_, send_splits, received_requests_, recv_splits).wait();

    // 3. The rows asked of this rank, as stored, back to each rank in its requests' order.
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t* in = received_requests_.data<int64_t>();
    std::vector<int64_t> serve_bytes(static_cast<size_t>(world), 0);
    for (int r = 0; r < world; ++r) {
        for (int64_t j = served_at[static_cast<size_t>(r)];
             j < served_at[static_cast<size_t>(r) + 1]; ++j)
            serve_bytes[static_cast<size_t>(r)] += row_bytes(in[2 * j]);
    }
    const std::vector<int64_t> serve_at = prefix(serve_bytes);
    replies_ = grow_prefix(replies_, serve_at.back(), DType::kU8);
    uint8_t* reply = replies_.data<uint8_t>();
    for (int64_t j = 0, at = 0; j < served_at.back(); ++j) {
        const auto t = static_cast<size_t>(in[2 * j]);
        const int64_t row = in[2 * j + 1], bytes = row_bytes(in[2 * j]);
        SR_CHECK(t < tables_.size() && row >= 0 && row < tables_[t].num_embeddings,
                 "QuantizedRowFetch: a request for row {} of table {} of {}", row, t,
                 tables_.size());
        const std::vector<int64_t>& first = first_rows_[t];
        const Shard& s = tables_[t].shards[static_cast<size_t>(
            std::upper_bound(first.begin(), first.end(), row) - first.begin() - 1)];
        SR_CHECK(s.rank == pg_->rank(), "table '{}': row {} was asked of rank {}, not its rank {}",
                 tables_[t].name, row, pg_->rank(), s.rank);
        std::memcpy(reply + at, s.stored.data<uint8_t>() + (row - s.row_offset) * bytes,
                    static_cast<size_t>(bytes));
        at += bytes;
    }
    bytes_read_ += serve_at.back();
    read_seconds_ += seconds_since(t0);
    const std::vector<int64_t> reply_at = prefix(reply_bytes);
    received_rows_ = grow_prefix(received_rows_, reply_at.back(), DType::kU8);
    pg_->all_to_all_v(replies_, serve_bytes, received_rows_, reply_bytes).wait();

    // 4. Each feature's rows in its ids' order, pooled as one process pools the stored table:
    //    the row of value i is row i - v0 of the feature's block.
    const auto t1 = std::chrono::steady_clock::now();
    int64_t total = 0;
    for (size_t f = 0; f < features_.size(); ++f)
        total += (off[(key[f] + 1) * B] - off[key[f] * B]) * row_bytes(features_[f].table);
    rows_ = grow_prefix(rows_, total, DType::kU8);
    ids_ = grow_prefix(ids_, n, DType::kI64);
    uint8_t* rows = rows_.data<uint8_t>();
    int64_t* local = ids_.data<int64_t>();
    const uint8_t* received = received_rows_.data<uint8_t>();
    const float* weights = kjt.has_weights() ? kjt.weights().data<float>() : nullptr;
    for (size_t f = 0, block = 0; f < features_.size(); ++f) {
        const Feature& feat = features_[f];
        const Table& table = tables_[static_cast<size_t>(feat.table)];
        const int64_t bytes = row_bytes(feat.table), v0 = off[key[f] * B];
        for (int64_t i = v0; i < off[(key[f] + 1) * B]; ++i) {
            const int r = table.shards[static_cast<size_t>(dest_[static_cast<size_t>(i)])].rank;
            std::memcpy(
                rows + block + (i - v0) * bytes,
                received + reply_at[static_cast<size_t>(r)] + reply_at_[static_cast<size_t>(i)],
                static_cast<size_t>(bytes));
            local[i] = i - v0;
        }
        const int64_t table_offset = 0;
        const auto type = static_cast<uint8_t>(table.type);
        const int32_t dims[2] = {0, static_cast<int32_t>(table.dim)}, feature_table = 0;
        kernels::cpu::quant_embedding_bag_forward(
            rows + block, &table_offset, &type, dims, &feature_table, 1, local, off + key[f] * B,
            weights, B, feat.pooling, out.data<float>() + feat.col, out.size(1));
        block += static_cast<size_t>((off[(key[f] + 1) * B] - v0) * bytes);
    }
    bytes_read_ += total + 8 * n;
    read_seconds_ += seconds_since(t1);
}

}  // namespace shardrec
