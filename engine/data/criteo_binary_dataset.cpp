#include "engine/data/criteo_binary_dataset.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/core/mapped_file.h"

namespace shardrec::data {
namespace {

// Maps a whole shard read-only (engine/core/mapped_file.h); a 0-byte file cannot be a shard
// (check_shard reports it).
Tensor map_shard(const std::string& path) {
    check_input_file(path, "the data shard");

    struct stat st {};

    SR_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode),
             "data shard {}: not a regular file (a shard is memory-mapped)", path);
    return map_file_region(path, 0, static_cast<int64_t>(st.st_size));
}

}  // namespace

CriteoBinaryDataset::CriteoBinaryDataset(const CriteoBinaryOptions& options)
    : options_(options), manifest_(read_criteo_manifest(options.path)) {
    const CriteoRecordLayout& layout = manifest_.layout;
    record_bytes_ = layout.record_bytes();
    const std::string& dir = options_.path;
    // Model features -> data columns.
    SR_CHECK(options_.feature_names.size() == options_.num_embeddings.size(),
             "criteo data: {} feature names but {} table sizes", options_.feature_names.size(),
             options_.num_embeddings.size());
    const auto columns = criteo_sparse_feature_names();
    for (size_t f = 0; f < options_.feature_names.size(); ++f) {
        const std::string& name = options_.feature_names[f];
        const auto it = std::find(columns.begin(), columns.end(), name);
        SR_CHECK(it != columns.end(),
                 "criteo data {}: the model's feature '{}' is not a Criteo column (cat_0 .. "
                 "cat_25)",
                 dir, name);
        const auto c = static_cast<int>(it - columns.begin());
        const bool managed = !options_.managed.empty() && options_.managed[f];
        const std::string table = options_.table_names.empty()
                                      ? std::string("its table")
                                      : fmt::format("its table '{}'", options_.table_names[f]);
        SR_CHECK(!layout.raw(c) || managed,
                 "criteo data {}: feature '{}' holds raw 64-bit ids (criteo-preprocess "
                 "--raw-ids) but {} has no managed_collision to map them to rows; add "
                 "model.tables[].managed_collision to it, or preprocess without --raw-ids",
                 dir, name, table);
        const int64_t data_rows = layout.num_embeddings[static_cast<size_t>(c)];
        SR_CHECK(managed || options_.num_embeddings[f] >= data_rows,
                 "criteo data {}: feature '{}' has ids up to {} (preprocessed with {} rows) but "
                 "{} has {} rows",
                 dir, name, data_rows - 1, data_rows, table, options_.num_embeddings[f]);
        columns_.push_back(c);
        id_offsets_.push_back(layout.sparse_offset(c));
        raw_.push_back(layout.raw(c));
    }
    // Shards, checked against the manifest.
    for (const CriteoInputInfo& input : manifest_.inputs) {
        for (const CriteoShardInfo& info : input.shards) {
            MappedShard shard;
            shard.path = dir + "/" + info.file;
            shard.map = map_shard(shard.path);
            shard.data = shard.map.numel() > 0 ? shard.map.data<uint8_t>() : nullptr;
            shard.size = static_cast<size_t>(shard.map.numel());
            shard.first_row = total_rows_;
            shard.rows = info.rows;
            shard.verified = std::make_unique<std::once_flag>();
            shards_.push_back(std::move(shard));
            const MappedShard& s = shards_.back();
            const ShardHeader h =
                check_shard(s.data, s.size, s.path, static_cast<uint32_t>(record_bytes_), false);
            SR_CHECK(static_cast<int64_t>(h.rows) == info.rows &&
                         h.fingerprint == info.fingerprint && h.payload_crc32 == info.crc32,
                     "data shard {}: its header (rows {}, crc32 {:08x}) does not match the "
                     "manifest (rows {}, crc32 {:08x}): written by another preprocessing run",
                     s.path, h.rows, h.payload_crc32, info.rows, info.crc32);
            total_rows_ += info.rows;
        }
    }
    // Splits.
    SR_CHECK(options_.eval_days >= 0 && options_.eval_fraction >= 0 && options_.eval_fraction < 1,
             "criteo data {}: eval_days must be >= 0 and eval_fraction in [0, 1)", dir);
    if (options_.eval_fraction > 0) {
        train_rows_ =
            total_rows_ - std::llround(options_.eval_fraction * static_cast<double>(total_rows_));
    } else {
        const auto days = static_cast<int64_t>(manifest_.inputs.size());
        SR_CHECK(options_.eval_days < days,
                 "criteo data {}: eval_days {} leaves no training day ({} inputs); use fewer "
                 "eval_days or eval_fraction",
                 dir, options_.eval_days, days);
        train_rows_ = total_rows_;
        for (int64_t d = days - options_.eval_days; d < days; ++d) {
            train_rows_ -= manifest_.inputs[static_cast<size_t>(d)].rows;
        }
    }
    SR_CHECK(train_rows_ > 0, "criteo data {}: the train split is empty ({} rows in all)", dir,
             total_rows_);
}

int64_t CriteoBinaryDataset::num_samples(Split split) const {
    return split == Split::kTrain ? train_rows_ : total_rows_ - train_rows_;
}

const uint8_t* CriteoBinaryDataset::record(int64_t row) const {
    // The last shard whose first row is <= row (empty shards share first rows: skip them).
    auto it = std::upper_bound(shards_.begin(), shards_.end(), row,
                               [](int64_t r, const MappedShard& s) { return r < s.first_row; });
    --it;
    while (it->rows == 0 || row >= it->first_row + it->rows) {
        ++it;
    }
    const MappedShard& s = *it;
    std::call_once(*s.verified, [&s, this] {
        check_shard(s.data, s.size, s.path, static_cast<uint32_t>(record_bytes_), true);
    });
    return s.data + kShardHeaderBytes + (row - s.first_row) * record_bytes_;
}

Batch CriteoBinaryDataset::batch(int64_t global_start, int64_t count, Split split) const {
    SR_CHECK(global_start >= 0 && count >= 0, "criteo data: bad sample range [{}, {} + {})",
             global_start, global_start, count);
    const int64_t n = num_samples(split);
    SR_CHECK(n > 0, "criteo data {}: the {} split is empty", options_.path,
             split == Split::kTrain ? "train" : "eval");
    const int64_t base = split == Split::kTrain ? 0 : train_rows_;
    const auto F = static_cast<int64_t>(columns_.size());
    std::vector<int64_t> bag(static_cast<size_t>(F));        // [F] ids per sample
    std::vector<int64_t> key_start(static_cast<size_t>(F));  // [F] first value of each key
    int64_t values_total = 0;
    for (int64_t f = 0; f < F; ++f) {
        bag[f] = manifest_.layout.multi_hot[static_cast<size_t>(columns_[f])];
        key_start[f] = values_total;
        values_total += bag[f] * count;
    }
    Batch out;
    out.dense = Tensor::empty({count, kCriteoNumDense}, DType::kF32);
    out.labels = Tensor::empty({count}, DType::kF32);
    Tensor values = Tensor::empty({values_total}, DType::kI64);
    Tensor lengths = Tensor::empty({F * count}, DType::kI64);
    float* dense = out.dense.data<float>();
    float* labels = out.labels.data<float>();
    int64_t* ids = values.data<int64_t>();
    int64_t* len = lengths.data<int64_t>();
    for (int64_t b = 0; b < count; ++b) {
        const uint8_t* rec = record(base + (global_start + b) % n);
        std::memcpy(&labels[b], rec, 4);
        std::memcpy(&dense[b * kCriteoNumDense], rec + 4, 4 * kCriteoNumDense);  // dense[b, :]
        for (int64_t f = 0; f < F; ++f) {
            len[f * count + b] = bag[f];
            const uint8_t* src = rec + id_offsets_[f];
            int64_t* dst = ids + key_start[f] + b * bag[f];
            if (raw_[static_cast<size_t>(f)]) {  // one-hot
                std::memcpy(dst, src, 8);
                continue;
            }
            for (int64_t j = 0; j < bag[f]; ++j) {
                int32_t id;
                std::memcpy(&id, src + 4 * j, 4);
                dst[j] = id;
            }
        }
    }
    out.sparse = KeyedJaggedTensor::from_lengths_sync(options_.feature_names, std::move(values),
                                                      std::move(lengths), std::nullopt, count);
    return out;
}

}  // namespace shardrec::data
