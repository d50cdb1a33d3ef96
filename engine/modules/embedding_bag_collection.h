// EmbeddingBagCollection (TorchRec): pooled lookups of several tables, one KeyedTensor out.
// Tables are stored table-batched, one group per (embedding_dim, data_type, pooling), each group
// one weights tensor [sum E, D] looked up by one kernel call (FBGEMM TBE). The optimizer is fused
// into backward (only touched rows change, no gradient is materialised), or, in dense mode, the
// backward writes a full gradient per table that a dense optimizer applies (parameters()).
// Rows come from (seed, table index, row) only, so every sharding starts from the same model.
// Tables with position_weights get their per-id weights from a PositionWeightedModule applied
// inside forward (TorchRec FeatureProcessedEmbeddingBagCollection); its position weights are dense
// parameters, trained by the dense optimizer.
// On a CUDA device the rows, their optimizer state and the outputs live on the device; the KJT
// stays on the host, where it is packed, and each batch's packed ids, offsets and weights are
// copied to the device in the stream's order (position weights stay on the host).
// Letters: T tables, F features (output keys), B batch, D dim, N ids.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/pinned_buffer.h"
#include "engine/core/stream.h"
#include "engine/modules/embedding_bag_collection_interface.h"
#include "engine/modules/embedding_config.h"
#include "engine/modules/module.h"
#include "engine/modules/position_weighted.h"
#include "engine/sparse/keyed_jagged_tensor.h"
#include "engine/sparse/keyed_tensor.h"
#include "kernels/embedding_bag.h"

namespace shardrec {

class EmbeddingBagCollection : public EmbeddingBagCollectionInterface {
public:
    // fused_optimizer: the optimizer applied inside backward; nullopt selects dense mode.
    // is_weighted: the input features carry per-sample weights (KJT weights: id_score_list
    // features). Position-weighted tables need no input weights.
    EmbeddingBagCollection(std::vector<EmbeddingBagConfig> tables,
                           bool is_weighted,
                           uint64_t seed,
                           std::optional<kernels::FusedOptimizerParams> fused_optimizer,
                           Device device = Device::cpu());

    // KeyedTensor with keys embedding_names() (feature names in table order, then feature_names
    // order) and values [B, sum D] f32. The KJT may list its keys in any order and carry extra
    // keys; a missing feature is an Error, as is a variable batch per key. The values tensor is
    // reused by the next forward of the same B (copy it to keep it).
    KeyedTensor forward(const KeyedJaggedTensor& features, Stream& stream = Stream::cpu()) override;

    // grad_values [B, sum D] f32 for the latest forward. Fused mode: updates the touched rows and
    // optimizer state once each (duplicates aggregated), then advances optimizer_step(). Dense
    // mode: overwrites weight_grad(t) of every table. When is_weighted, also writes
    // grad_per_sample_weights() (computed before any row changes).
    void backward(const Tensor& grad_values, Stream& stream = Stream::cpu()) override;

    // ---- configuration ----
    const std::vector<EmbeddingBagConfig>& embedding_bag_configs() const { return tables_; }

    const std::vector<EmbeddingBagConfig>& tables() const { return tables_; }

    bool is_weighted() const { return is_weighted_; }

    bool is_fused() const { return fused_.has_value(); }

    Device device() const { return device_; }

    // The output keys, and the dim of each.
    const std::vector<std::string>& embedding_names() const override { return names_; }

    const std::vector<int64_t>& embedding_dims() const override { return dims_; }

    // ---- fused optimizer ----
    void set_learning_rate(float lr) override;
    // The fused optimizer's parameters, with step() = updates done + 1. Throws in dense mode.
    const kernels::FusedOptimizerParams& fused_optimizer() const;
    void set_optimizer_step(int64_t step);  // resume: the step of the next update (>= 1)

    // ---- tensors (views into the group storage) ----
    Tensor weight(int64_t table) const;  // [E, D] of the table's dtype
    // Fused optimizer state of a table, as kernels/embedding_optimizer.h lays it out: none (SGD),
    // {G [E, D]} (Adagrad), {G [E]} (row-wise Adagrad), {m [E, D], v [E, D]} (Adam).
    std::vector<Tensor> optimizer_state(int64_t table) const;
    Tensor weight_grad(int64_t table) const;  // dense mode: [E, D] f32 of the latest backward
    // One whole-table shard per table, sharing the fused optimizer's step counter.
    std::vector<EmbeddingShardState> shard_states() override;

    // d loss / d KJT weights [N] f32, in the latest forward KJT's value order (0 for keys this
    // module does not read; for position-weighted keys, d loss / d their position weight). Defined
    // after backward when is_weighted or some table is position-weighted.
    const Tensor& grad_per_sample_weights() const { return grad_psw_; }

    int64_t num_parameters() const;            // sum of E * D
    int64_t parameter_bytes() const override;  // weights storage
    int64_t optimizer_state_bytes() const override;

    // Dense mode: one Parameter per table, "embedding_bags.<name>.weight", value and grad views
    // into the group storage (fused mode: none, the tables own their optimizer); then the position
    // weights, "position_weights.<feature>".
    std::vector<Parameter*> parameters() override;

    // The position weights; nullptr when no table has position_weights.
    const PositionWeightedModule* position_weighted() const { return position_weighted_.get(); }

private:
    // One table-batched group: the tables sharing (D, dtype, pooling), looked up by one kernel.
    struct Group {
        int64_t dim = 0;
        DType dtype = DType::kF32;
        PoolingMode pooling = PoolingMode::kSum;
        std::vector<int64_t> tables;    // table indices, in table order
        std::vector<int64_t> features;  // output key indices, in group order
        Tensor weights;                 // [sum E, D]
        Tensor table_offsets;           // [T_g + 1] i64
        Tensor feature_table;           // [F_g] i32
        Tensor state1, state2;          // fused optimizer state, f32
        Tensor grad_weights;            // dense mode: [sum E, D] f32
        kernels::EmbeddingBackwardWorkspace workspace;
        KjtFeaturePacker packer;  // the latest batch's ids/offsets/weights in group order
        // On a CUDA device: the packed batch copied there (grow-only storage, then views),
        // through pinned staging, into the buffer set of the forward's parity (see ids_stream_).
        std::optional<HostToDeviceStager> stager;
        std::array<Tensor, 2> ids_buf, offsets_buf, psw_buf;
        Tensor grad_psw_dev_buf;
        Tensor ids, offsets, psw;
        Tensor grad_psw, grad_psw_buffer;
        Tensor out, grad_out;  // [B, F_g * D]; out is values_ itself when direct_output
        bool direct_output = false;
    };

    struct FeatureSlot {
        std::string name;
        int64_t table = 0;
        int64_t group = 0;
        int64_t column = 0;  // first column in values
    };

    void build_groups(uint64_t seed);
    void init_group(int64_t index, uint64_t seed);  // storage, init, optimizer state
    void gather_group_grad(Group& g, const Tensor& grad_values, Stream& stream);

    std::vector<EmbeddingBagConfig> tables_;
    bool is_weighted_;
    std::unique_ptr<PositionWeightedModule> position_weighted_;
    bool lookup_weighted_ = false;  // the lookups take per-sample weights (data or position)
    std::optional<kernels::FusedOptimizerParams> fused_;
    Device device_;
    std::vector<std::string> names_;
    std::vector<int64_t> dims_;
    std::vector<FeatureSlot> features_;  // per output key
    std::vector<Group> groups_;
    // CUDA: a forward copies its ids on a stream of their own, so that the copy of batch i + 1
    // overlaps the backward of batch i (the previous forward's batch), which reads the other
    // buffer set. ids_free_[s] is recorded on the compute stream by the forward before the one
    // that fills set s: everything of the batch that used set s before is then enqueued there.
    Stream ids_stream_;
    std::array<Event, 2> ids_free_;
    Event ids_copied_;
    int64_t num_forwards_ = 0;
    std::vector<std::pair<int64_t, int64_t>> table_location_;  // table -> (group, first row)
    std::vector<Parameter> dense_parameters_;
    Tensor values_;    // [B, sum D] output
    Tensor grad_psw_;  // [N of the latest KJT] f32, a view of grad_psw_buffer_
    Tensor grad_psw_buffer_;
    int64_t batch_ = -1;
    int64_t sum_dims_ = 0;
    int64_t kjt_num_values_ = 0;
};

}  // namespace shardrec
