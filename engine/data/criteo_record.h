// The fixed-size binary record `shardrec data criteo-preprocess` writes for one Criteo sample,
// little-endian, no padding:
//   label      f32                 0 or 1
//   dense      f32[13]             log(max(x, 0) + 1), as the DLRM reference (negatives -> 0)
//   sparse     i32[sum(multi_hot)] cat_0's multi_hot[0] ids, then cat_1's, ... cat_25's
// A categorical value v becomes the id v mod num_embeddings[t] (DLRM's --max-ind-range rule).
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

    // One-hot, every table `rows` rows (--max-ind-range).
    static CriteoRecordLayout one_hot(int64_t rows);

    int64_t ids_per_sample() const;  // sum(multi_hot)
    int64_t record_bytes() const;    // 4 + 4 * 13 + 4 * ids_per_sample()
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
