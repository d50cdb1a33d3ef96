#include "engine/data/criteo_record.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/rng.h"

namespace shardrec::data {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "records are written in host byte order, which must be little-endian");

CriteoRecordLayout CriteoRecordLayout::one_hot(int64_t rows) {
    CriteoRecordLayout layout;
    layout.num_embeddings.assign(kCriteoNumSparse, rows);
    layout.multi_hot.assign(kCriteoNumSparse, 1);
    return layout;
}

void CriteoRecordLayout::set_raw(int t) {
    raw_ids.resize(kCriteoNumSparse, false);
    raw_ids[static_cast<size_t>(t)] = true;
    num_embeddings[static_cast<size_t>(t)] = 0;
    multi_hot[static_cast<size_t>(t)] = 1;
}

bool CriteoRecordLayout::any_raw() const {
    return std::find(raw_ids.begin(), raw_ids.end(), true) != raw_ids.end();
}

int64_t CriteoRecordLayout::ids_per_sample() const {
    int64_t n = 0;
    for (const int64_t l : multi_hot) {
        n += l;
    }
    return n;
}

int64_t CriteoRecordLayout::record_bytes() const {
    return sparse_offset(kCriteoNumSparse);
}

int64_t CriteoRecordLayout::sparse_offset(int t) const {
    int64_t offset = 4 * (1 + kCriteoNumDense);
    for (int k = 0; k < t; ++k) {
        offset += id_bytes(k) * multi_hot[static_cast<size_t>(k)];
    }
    return offset;
}

void CriteoRecordLayout::validate() const {
    SR_CHECK(num_embeddings.size() == kCriteoNumSparse && multi_hot.size() == kCriteoNumSparse,
             "criteo layout: need {} table sizes and multi-hot sizes, got {} and {}",
             kCriteoNumSparse, num_embeddings.size(), multi_hot.size());
    SR_CHECK(raw_ids.empty() || raw_ids.size() == kCriteoNumSparse,
             "criteo layout: need {} raw-id flags (or none), got {}", kCriteoNumSparse,
             raw_ids.size());
    for (int t = 0; t < kCriteoNumSparse; ++t) {
        const auto i = static_cast<size_t>(t);
        if (raw(t)) {
            SR_CHECK(num_embeddings[i] == 0 && multi_hot[i] == 1,
                     "criteo layout: cat_{} has raw ids, so it must have num_embeddings 0 and "
                     "multi-hot size 1, not {} and {}",
                     t, num_embeddings[i], multi_hot[i]);
            continue;
        }
        SR_CHECK(num_embeddings[i] >= 1 && num_embeddings[i] <= kCriteoMaxTableRows,
                 "criteo layout: cat_{} has {} rows (want 1 to 2^31)", t, num_embeddings[i]);
        SR_CHECK(multi_hot[i] >= 1 && multi_hot[i] <= 4096,
                 "criteo layout: cat_{} has multi-hot size {} (want 1 to 4096)", t, multi_hot[i]);
    }
}

const std::vector<int64_t>& mlperf_dcnv2_num_embeddings() {
    static const std::vector<int64_t> rows = {
        40000000, 39060,    17295,    7424,     20265,  3,     7122, 1543, 63,
        40000000, 3067956,  405282,   10,       2209,   11938, 155,  4,    976,
        14,       40000000, 40000000, 40000000, 590152, 12973, 108,  36};
    return rows;
}

const std::vector<int64_t>& mlperf_dcnv2_multi_hot() {
    static const std::vector<int64_t> sizes = {3, 2, 1, 2, 6, 1, 1,  1,   1,  7,  3, 8, 1,
                                               6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
    return sizes;
}

float criteo_dense_value(int64_t x) {
    return static_cast<float>(std::log1p(static_cast<double>(x < 0 ? 0 : x)));
}

int64_t criteo_multi_hot_id(uint64_t seed, int t, int64_t id, int64_t j, int64_t E) {
    if (j == 0) {
        return id;
    }
    const auto rows = static_cast<uint64_t>(E);
    const uint64_t offset = rng::hash(seed, static_cast<uint64_t>(t), static_cast<uint64_t>(id),
                                      static_cast<uint64_t>(j)) %
                            rows;
    return static_cast<int64_t>((static_cast<uint64_t>(id) + offset) % rows);
}

void encode_criteo_record(const CriteoLine& line, const CriteoRecordLayout& layout, uint8_t* out) {
    float head[1 + kCriteoNumDense];
    head[0] = static_cast<float>(line.label);
    for (int j = 0; j < kCriteoNumDense; ++j) {
        head[1 + j] = criteo_dense_value(line.dense[static_cast<size_t>(j)]);
    }
    std::memcpy(out, head, sizeof(head));
    auto* ids = out + sizeof(head);
    for (int t = 0; t < kCriteoNumSparse; ++t) {
        const auto i = static_cast<size_t>(t);
        if (layout.raw(t)) {
            std::memcpy(ids, &line.sparse[i], 8);  // the value's 64 bits, read back as i64
            ids += 8;
            continue;
        }
        const int64_t E = layout.num_embeddings[i];
        const auto id = static_cast<int64_t>(line.sparse[i] % static_cast<uint64_t>(E));
        for (int64_t j = 0; j < layout.multi_hot[i]; ++j) {
            const auto v =
                static_cast<int32_t>(criteo_multi_hot_id(layout.multi_hot_seed, t, id, j, E));
            std::memcpy(ids, &v, 4);
            ids += 4;
        }
    }
}

std::vector<std::string> criteo_sparse_feature_names() {
    std::vector<std::string> names;
    for (int t = 0; t < kCriteoNumSparse; ++t) {
        names.push_back("cat_" + std::to_string(t));
    }
    return names;
}

}  // namespace shardrec::data
