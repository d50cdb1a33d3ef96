// Inference over row-sharded quantized tables (row_wise, table_row_wise) with the scores of one
// process at any world size and plan. Training's output dist adds the partial sums of a bag's
// row shards on the rank of its sample, an order of additions that depends on which rank holds
// which rows, so its pooled values move in the last bits from one world size to another. Here
// the rows themselves travel instead: every id of this rank's batch is sent to the rank holding
// its row (two all-to-alls: the (table, row) requests out, the rows as stored back), and the bags
// are pooled where their samples are, by the same kernel over the same bytes in the bag's order
// as QuantEmbeddingBagCollection in one process. It moves the stored row (int8 dim 64: 80 bytes)
// plus 16 bytes of request per id, where the partial sums move 4 D bytes per bag and row shard.
// Host only. Letters: B batch, F features, N ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/pooling_mode.h"
#include "engine/core/tensor.h"
#include "engine/sparse/keyed_jagged_tensor.h"
#include "kernels/quant_embedding_bag.h"

namespace shardrec {

class QuantizedRowFetch {
public:
    // A row shard of a table: rows [row_offset, row_offset + rows) on `rank`; `stored` is u8
    // [rows * quant_row_bytes(type, dim)] on that rank (undefined elsewhere).
    struct Shard {
        int64_t row_offset = 0, rows = 0;
        int rank = 0;
        Tensor stored;
    };

    struct Table {
        std::string name;
        kernels::QuantType type = kernels::QuantType::kInt8;
        int64_t num_embeddings = 0, dim = 0;
        std::vector<Shard> shards;  // covering [0, num_embeddings), any order
    };

    // A feature looked up in tables[table], pooled by `pooling`, written to output column `col`.
    struct Feature {
        std::string name;
        int64_t table = 0;
        PoolingMode pooling = PoolingMode::kSum;
        int64_t col = 0;
    };

    QuantizedRowFetch(std::shared_ptr<comm::ProcessGroup> pg,
                      std::vector<Table> tables,
                      std::vector<Feature> features);

    // Collective. Pools this rank's bags of every feature (kjt: fixed stride, its weights the
    // per-id weights when present) into out's columns [col, col + dim) of each feature's rows
    // [0, B), leaving its other columns alone. Ids outside a table's rows are an Error naming
    // the feature, table and id.
    void forward(const KeyedJaggedTensor& kjt, Tensor& out);

    // The bytes of stored rows this rank holds. Since construction: the bytes its lookups read
    // (the rows it served, then the rows and 8-byte ids it pooled) and their seconds.
    int64_t stored_bytes() const;

    int64_t bytes_read() const { return bytes_read_; }

    double read_seconds() const { return read_seconds_; }

private:
    int64_t row_bytes(int64_t table) const;

    std::shared_ptr<comm::ProcessGroup> pg_;
    std::vector<Table> tables_;
    std::vector<Feature> features_;
    // Per table: its shards sorted by row_offset, and the first row of each (for the search).
    std::vector<std::vector<int64_t>> first_rows_;
    // Grow-only buffers of one forward.
    Tensor requests_, received_requests_, replies_, received_rows_, rows_, ids_, offsets_, out_;
    std::vector<int64_t> dest_, reply_at_;
    int64_t bytes_read_ = 0;
    double read_seconds_ = 0;
};

}  // namespace shardrec
