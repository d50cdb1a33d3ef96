// The fixed-size binary record `shardrec data criteo-preprocess` writes for one Criteo sample,
// little-endian, no padding:
//   label      f32                 0 or 1
//   dense      f32[13]             log(max(x, 0) + 1), as the DLRM reference (negatives -> 0)
//   sparse     i32[sum(multi_hot)] cat_0's multi_hot[0] ids, then cat_1's, ... cat_25's
// A categorical value v becomes the id v mod num_embeddings[t] (DLRM's --max-ind-range rule).
// A raw-id feature (raw_ids[t], criteo-preprocess --raw-ids) instead stores v itself as one i64
// (the 64-bit value's bits), for a managed-collision table to remap: its num_embeddings is 0 (it
// implies no rows) and its multi_hot 1 (materialised bags are defined mod the table's rows).
// With multi_hot[t] = L > 1 the sample gets L ids, materialised deterministically from the one-hot
// id as MLPerf DLRM-DCNv2's materialize_synthetic_multihot does: id_0 = id and
// id_j = (id + offset_t(id, j)) mod E with a uniform offset that depends only on (seed, t, id, j).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/criteo_tsv.h"

namespace shardrec::data {

// Ids are stored as i32, so a table may have at most 2^31 rows.
constexpr int64_t kCriteoMaxTableRows = int64_t{1} << 31;

struct CriteoRecordLayout {
    std::vector<int64_t> num_embeddings;  // [26] rows of table t: ids are in [0, E)
    std::vector<int64_t> multi_hot;       // [26] ids per sample of feature t (1: one-hot)
    uint64_t multi_hot_seed = 0;          // keys the multi-hot offsets
    std::vector<bool> raw_ids;            // [26] i64 raw ids, or empty: none (every feature i32)

    // One-hot, every table `rows` rows (--max-ind-range).
    static CriteoRecordLayout one_hot(int64_t rows);

    // Makes feature t a raw-id feature (num_embeddings 0, one-hot).
    void set_raw(int t);

    bool raw(int t) const { return !raw_ids.empty() && raw_ids[static_cast<size_t>(t)]; }

    bool any_raw() const;

    int64_t id_bytes(int t) const { return raw(t) ? 8 : 4; }

    int64_t ids_per_sample() const;  // sum(multi_hot)
    int64_t record_bytes() const;    // 4 + 4 * 13 + sum(id_bytes(t) * multi_hot[t])
    // Byte offset of feature t's first id inside a record.
    int64_t sparse_offset(int t) const;
    void validate() const;  // throws naming the feature
};

// The MLPerf DLRM-DCNv2 (Criteo 1TB multi-hot) per-table rows and multi-hot sizes
// (configs/dlrm_dcnv2_mlperf.yaml).
const std::vector<int64_t>& mlperf_dcnv2_num_embeddings();
const std::vector<int64_t>& mlperf_dcnv2_multi_hot();

// log(max(x, 0) + 1) computed in double and rounded once to f32.
float criteo_dense_value(int64_t x);

// Id j (0-based, j < L) of feature t's multi-hot bag for one-hot id `id` of a table of E rows.
int64_t criteo_multi_hot_id(uint64_t seed, int t, int64_t id, int64_t j, int64_t E);

// Writes `line` as one record of `layout` (layout.record_bytes() bytes at out).
void encode_criteo_record(const CriteoLine& line, const CriteoRecordLayout& layout, uint8_t* out);

// "cat_0", ... "cat_25": the feature names of the sparse columns, in record order.
std::vector<std::string> criteo_sparse_feature_names();

}  // namespace shardrec::data
