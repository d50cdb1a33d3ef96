// The Criteo binary loader (data.type: criteo_binary): memory-maps the shards that
// `shardrec data criteo-preprocess` wrote and serves batches by sample index (dataset.h), so every
// rank reads its own slice of each global batch straight from the mapped files.
//   - Splits: rows are numbered in manifest order (inputs, then shards). The eval split is the
//     rows of the last eval_days inputs (days), or, when eval_fraction > 0, the last
//     round(eval_fraction * rows) rows; the train split is every row before it. Each split wraps
//     around (epochs).
//   - Features: each model feature must be one of cat_0..cat_25 and its table must have at least
//     the data's num_embeddings rows, unless it is a managed-collision table (its ids are raw ids
//     the remap maps to rows). Bags have the manifest's multi-hot size (1: one-hot). A raw-id
//     column (criteo-preprocess --raw-ids) gives its i64 values unchanged and must feed a
//     managed-collision table: unremapped they would index rows far beyond any table.
//   - Checks: on open, every shard's header, size and fingerprint against the manifest (a
//     truncated or foreign shard is an error naming it); a shard's payload checksum is verified
//     the first time a batch touches it (once, on the thread that reads it: usually the prefetch
//     thread), so a TB-scale dataset opens in seconds and corruption never reaches training. The
//     same pass refuses a label other than 0 or 1 (shard, record index, value): the CRC only
//     proves the bytes are the ones written, not that a writer put a click label there.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/data/criteo_shard.h"
#include "engine/data/dataset.h"

namespace shardrec::data {

struct CriteoBinaryOptions {
    std::string path;  // the directory with manifest.json
    int64_t eval_days = 1;
    double eval_fraction = 0.0;
    // The model's features (in model order) and the rows of each one's table.
    std::vector<std::string> feature_names;
    std::vector<int64_t> num_embeddings;
    std::vector<std::string> table_names;  // [F] each one's table, for messages (or empty)
    std::vector<bool> managed;             // [F] its table has managed_collision (or empty: none)
};

class CriteoBinaryDataset : public Dataset {
public:
    explicit CriteoBinaryDataset(const CriteoBinaryOptions& options);

    Batch batch(int64_t global_start, int64_t count, Split split) const override;
    int64_t num_samples(Split split) const override;

    std::vector<std::string> feature_names() const override { return options_.feature_names; }

    const CriteoManifest& manifest() const { return manifest_; }

private:
    struct MappedShard {
        std::string path;
        Tensor map;                     // u8, the whole file (engine/core/mapped_file.h)
        const uint8_t* data = nullptr;  // map's bytes
        size_t size = 0;
        int64_t first_row = 0;  // global row of its first record
        int64_t rows = 0;
        std::unique_ptr<std::once_flag> verified;
    };

    // The record of global row `row`, its shard's checksum verified.
    const uint8_t* record(int64_t row) const;

    CriteoBinaryOptions options_;
    CriteoManifest manifest_;
    std::vector<MappedShard> shards_;
    std::vector<int64_t> columns_;     // [F] the data column (cat_<c>) of each model feature
    std::vector<int64_t> id_offsets_;  // [F] byte offset of that column's ids in a record
    std::vector<bool> raw_;            // [F] that column holds i64 raw ids
    int64_t record_bytes_ = 0;
    int64_t train_rows_ = 0;  // rows [0, train_rows_) train, [train_rows_, total) eval
    int64_t total_rows_ = 0;
};

}  // namespace shardrec::data
