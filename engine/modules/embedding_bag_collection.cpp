// EmbeddingBagCollection: table-batched groups, KJT packing per group (KjtFeaturePacker), and
// the fused or dense backward (see the header). With one group the kernel writes the KT values
// directly; several groups write their own [B, F_g * D] and are scattered by column. Buffers
// are reused: a step of a batch shape already seen allocates nothing.
#include "engine/modules/embedding_bag_collection.h"

#include <algorithm>
#include <set>

#include "engine/core/allocator.h"
#include "engine/modules/init.h"

namespace shardrec {
namespace {

// Copies columns [src_col, src_col + width) of src [B, src_cols] to dst [B, dst_cols] (f32, one
// device), in the stream's order.
void copy_columns(const Tensor& src,
                  int64_t src_col,
                  Tensor& dst,
                  int64_t dst_col,
                  int64_t width,
                  Stream& stream) {
    constexpr size_t f = sizeof(float);
    copy_2d_async(dst.data<float>() + dst_col, static_cast<size_t>(dst.size(1)) * f, dst.device(),
                  src.data<float>() + src_col, static_cast<size_t>(src.size(1)) * f, src.device(),
                  static_cast<size_t>(width) * f, static_cast<size_t>(src.size(0)), stream);
}

}  // namespace

EmbeddingBagCollection::EmbeddingBagCollection(
    std::vector<EmbeddingBagConfig> tables,
    bool is_weighted,
    uint64_t seed,
    std::optional<kernels::FusedOptimizerParams> fused_optimizer,
    Device device)
    : tables_(std::move(tables)),
      is_weighted_(is_weighted),
      fused_(fused_optimizer),
      device_(device),
      ids_stream_(device),
      ids_free_{{Event(device), Event(device)}},
      ids_copied_(device) {
    SR_CHECK(!tables_.empty(), "EmbeddingBagCollection needs at least one table");
    SR_CHECK(!fused_ || fused_->step >= 1, "fused optimizer step must be >= 1");
    std::set<std::string> table_names, feature_names;
    for (size_t t = 0; t < tables_.size(); ++t) {
        const EmbeddingBagConfig& c = tables_[t];
        SR_CHECK(table_names.insert(c.name).second, "table name '{}' appears twice", c.name);
        SR_CHECK(c.num_embeddings > 0 && c.embedding_dim > 0 && !c.feature_names.empty(),
                 "table '{}': needs num_embeddings > 0, embedding_dim > 0 and feature_names",
                 c.name);
        SR_CHECK(is_floating(c.data_type), "table '{}': data_type must be f32, f16 or bf16",
                 c.name);
        for (const std::string& f : c.feature_names) {
            SR_CHECK(feature_names.insert(f).second,
                     "feature '{}' is listed twice (table '{}'); output keys must be unique", f,
                     c.name);
            FeatureSlot slot;
            slot.name = f;
            slot.table = static_cast<int64_t>(t);
            slot.column = sum_dims_;
            features_.push_back(slot);
            names_.push_back(f);
            dims_.push_back(c.embedding_dim);
            sum_dims_ += c.embedding_dim;
        }
    }
    position_weighted_ = make_position_weighted_module(tables_);
    lookup_weighted_ = is_weighted_ || position_weighted_ != nullptr;
    build_groups(seed);
}

void EmbeddingBagCollection::build_groups(uint64_t seed) {
    std::vector<int64_t> group_of_table(tables_.size());
    for (size_t t = 0; t < tables_.size(); ++t) {
        const EmbeddingBagConfig& c = tables_[t];
        auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
            return g.dim == c.embedding_dim && g.dtype == c.data_type && g.pooling == c.pooling;
        });
        if (it == groups_.end()) {
            groups_.emplace_back();
            it = groups_.end() - 1;
            it->dim = c.embedding_dim;
            it->dtype = c.data_type;
            it->pooling = c.pooling;
        }
        it->tables.push_back(static_cast<int64_t>(t));
        group_of_table[t] = it - groups_.begin();
    }
    for (size_t f = 0; f < features_.size(); ++f) {
        features_[f].group = group_of_table[static_cast<size_t>(features_[f].table)];
        groups_[static_cast<size_t>(features_[f].group)].features.push_back(
            static_cast<int64_t>(f));
    }
    table_location_.resize(tables_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
        init_group(static_cast<int64_t>(g), seed);
    }
    if (!fused_) {
        for (size_t t = 0; t < tables_.size(); ++t) {
            Parameter p;
            p.name = "embedding_bags." + tables_[t].name + ".weight";
            p.value = weight(static_cast<int64_t>(t));
            p.grad = weight_grad(static_cast<int64_t>(t));
            dense_parameters_.push_back(std::move(p));
        }
    }
}

void EmbeddingBagCollection::init_group(int64_t index, uint64_t seed) {
    Group& g = groups_[static_cast<size_t>(index)];
    std::vector<int64_t> offsets{0};
    for (int64_t t : g.tables) {
        table_location_[static_cast<size_t>(t)] = {index, offsets.back()};
        offsets.push_back(offsets.back() + tables_[static_cast<size_t>(t)].num_embeddings);
    }
    const int64_t rows = offsets.back();
    std::vector<std::string> table_names;
    for (int64_t t : g.tables) {
        table_names.push_back("'" + tables_[static_cast<size_t>(t)].name + "'");
    }
    const std::string label =
        fmt::format("the rows of table{} {} [{}, {}]", g.tables.size() == 1 ? "" : "s",
                    fmt::join(table_names, ", "), rows, g.dim);
    with_allocation_label(label, [&] {
        g.weights = Tensor::empty({rows, g.dim}, g.dtype, device_);
        for (size_t i = 0; i < g.tables.size(); ++i) {
            Tensor view = g.weights.slice(offsets[i], offsets[i + 1]);
            init_embedding_rows(view, seed, g.tables[i], 0, 0,
                                tables_[static_cast<size_t>(g.tables[i])].num_embeddings);
        }
    });
    std::vector<int32_t> feature_table;
    std::vector<std::string> names;
    for (int64_t f : g.features) {
        const FeatureSlot& slot = features_[static_cast<size_t>(f)];
        feature_table.push_back(static_cast<int32_t>(
            std::find(g.tables.begin(), g.tables.end(), slot.table) - g.tables.begin()));
        names.push_back(slot.name);
    }
    g.packer = KjtFeaturePacker("EmbeddingBagCollection", std::move(names));
    g.table_offsets = Tensor::from_vector(offsets).to(device_);
    g.feature_table = Tensor::from_vector(feature_table).to(device_);
    // One group holds every key in output order, so its kernel output is the KT values.
    g.direct_output = groups_.size() == 1;
    with_allocation_label(
        fused_ ? "the optimizer state of " + label : "the gradient of " + label, [&] {
            if (!fused_) {
                g.grad_weights = Tensor::zeros({rows, g.dim}, DType::kF32, device_);
                return;
            }
            kernels::make_optimizer_states(*fused_, rows, g.dim, g.state1, g.state2, device_);
        });
}

// ---- forward ----

KeyedTensor EmbeddingBagCollection::forward(const KeyedJaggedTensor& input, Stream& stream) {
    if (is_weighted_) {
        SR_CHECK(input.has_weights(),
                 "EmbeddingBagCollection: the collection is weighted but the KJT has no weights");
    }
    std::optional<KeyedJaggedTensor> weighted;
    if (position_weighted_) {
        weighted.emplace(position_weighted_->forward(input));
    }
    const KeyedJaggedTensor& features = weighted ? *weighted : input;
    const int64_t batch = features.stride();
    if (batch != batch_) {
        values_ = Tensor::empty({batch, sum_dims_}, DType::kF32, device_);
        batch_ = batch;
    }
    kjt_num_values_ = features.values().numel();
    const size_t set = static_cast<size_t>(num_forwards_++ % 2);
    if (device_.is_cuda()) {
        ids_free_[1 - set].record(stream);  // the batch before, whose backward reads set 1 - set
        ids_free_[set].wait(ids_stream_);
    }
    for (Group& g : groups_) {
        g.packer.pack(features, lookup_weighted_);
        if (device_.is_cuda()) {
            const KjtFeaturePacker& p = g.packer;
            if (!g.stager)
                g.stager.emplace(device_);
            g.stager->begin(HostToDeviceStager::padded_bytes(p.ids()) +
                            HostToDeviceStager::padded_bytes(p.offsets()) +
                            (lookup_weighted_ ? HostToDeviceStager::padded_bytes(p.weights()) : 0));
            g.ids = g.stager->copy(g.ids_buf[set], p.ids());
            g.offsets = g.stager->copy(g.offsets_buf[set], p.offsets());
            if (lookup_weighted_)
                g.psw = g.stager->copy(g.psw_buf[set], p.weights());
            g.stager->end(ids_stream_);
            ids_copied_.record(ids_stream_);
            ids_copied_.wait(stream);
        } else {
            g.ids = g.packer.ids();
            g.offsets = g.packer.offsets();
            g.psw = lookup_weighted_ ? g.packer.weights() : Tensor();
        }
        const auto num_features = static_cast<int64_t>(g.features.size());
        if (g.direct_output) {
            g.out = values_;
        } else {
            init::reuse_or_allocate(g.out, {batch, num_features * g.dim}, device_);
        }
        kernels::embedding_bag_forward(g.weights, g.table_offsets, g.feature_table, g.ids,
                                       g.offsets, lookup_weighted_ ? &g.psw : nullptr, g.pooling,
                                       g.out, stream);
        if (g.direct_output) {
            continue;
        }
        for (int64_t i = 0; i < num_features; ++i) {
            copy_columns(g.out, i * g.dim, values_,
                         features_[static_cast<size_t>(g.features[static_cast<size_t>(i)])].column,
                         g.dim, stream);
        }
    }
    return KeyedTensor(names_, dims_, values_);
}

// ---- backward ----

void EmbeddingBagCollection::gather_group_grad(Group& g,
                                               const Tensor& grad_values,
                                               Stream& stream) {
    if (g.direct_output) {
        g.grad_out = grad_values;
        return;
    }
    const auto num_features = static_cast<int64_t>(g.features.size());
    init::reuse_or_allocate(g.grad_out, {batch_, num_features * g.dim}, device_);
    for (int64_t i = 0; i < num_features; ++i) {
        copy_columns(grad_values,
                     features_[static_cast<size_t>(g.features[static_cast<size_t>(i)])].column,
                     g.grad_out, i * g.dim, g.dim, stream);
    }
}

void EmbeddingBagCollection::backward(const Tensor& grad_values, Stream& stream) {
    SR_CHECK(batch_ >= 0, "EmbeddingBagCollection::backward before any forward");
    SR_CHECK(
        grad_values.dtype() == DType::kF32 && grad_values.shape() == Shape({batch_, sum_dims_}),
        "EmbeddingBagCollection::backward: grad_values must be f32[{}, {}], got {}", batch_,
        sum_dims_, grad_values.str());
    if (lookup_weighted_) {
        grad_psw_ = grow_prefix(grad_psw_buffer_, kjt_num_values_, DType::kF32);
        grad_psw_.zero_();  // keys this module does not read get 0
    }
    for (Group& g : groups_) {
        gather_group_grad(g, grad_values, stream);
        const KjtFeaturePacker& in = g.packer;
        Tensor* grad_psw = nullptr;  // on device_
        Tensor grad_psw_dev;
        if (lookup_weighted_) {
            g.grad_psw = in.is_direct()
                             ? grad_psw_
                             : grow_prefix(g.grad_psw_buffer, in.ids().numel(), DType::kF32);
            grad_psw = &g.grad_psw;
            if (device_.is_cuda()) {
                grad_psw_dev =
                    grow_prefix(g.grad_psw_dev_buf, in.ids().numel(), DType::kF32, device_);
                grad_psw = &grad_psw_dev;
            }
        }
        const Tensor* psw = lookup_weighted_ ? &g.psw : nullptr;
        if (fused_) {
            if (grad_psw != nullptr) {  // before the rows change
                kernels::embedding_bag_backward(g.grad_out, g.weights, g.table_offsets,
                                                g.feature_table, g.ids, g.offsets, psw, g.pooling,
                                                nullptr, grad_psw, g.workspace, stream);
            }
            kernels::embedding_bag_backward_fused(
                g.grad_out, g.table_offsets, g.feature_table, g.ids, g.offsets, psw, g.pooling,
                *fused_, g.weights, g.state1.defined() ? &g.state1 : nullptr,
                g.state2.defined() ? &g.state2 : nullptr, g.workspace, stream);
        } else {
            kernels::embedding_bag_backward(g.grad_out, g.weights, g.table_offsets, g.feature_table,
                                            g.ids, g.offsets, psw, g.pooling, &g.grad_weights,
                                            grad_psw, g.workspace, stream);
        }
        if (grad_psw_dev.defined()) {  // the per-sample-weight gradients are read on the host
            stream.synchronize();
            g.grad_psw.copy_from(grad_psw_dev);
        }
        if (grad_psw != nullptr && !in.is_direct()) {
            in.scatter_to_kjt_order(g.grad_psw.data<float>(), grad_psw_.data<float>());
        }
    }
    if (fused_) {
        ++fused_->step;
    }
    if (position_weighted_) {
        position_weighted_->backward(grad_psw_);
    }
}

// ---- accessors ----

void EmbeddingBagCollection::set_learning_rate(float lr) {
    SR_CHECK(fused_.has_value(), "set_learning_rate: the collection is in dense mode");
    fused_->learning_rate = lr;
}

const kernels::FusedOptimizerParams& EmbeddingBagCollection::fused_optimizer() const {
    SR_CHECK(fused_.has_value(), "fused_optimizer: the collection is in dense mode");
    return *fused_;
}

void EmbeddingBagCollection::set_optimizer_step(int64_t step) {
    SR_CHECK(fused_.has_value() && step >= 1, "set_optimizer_step({}): needs fused mode, step >= 1",
             step);
    fused_->step = step;
}

Tensor EmbeddingBagCollection::weight(int64_t table) const {
    SR_CHECK(table >= 0 && table < static_cast<int64_t>(tables_.size()), "no table {}", table);
    const auto [g, row] = table_location_[static_cast<size_t>(table)];
    return groups_[static_cast<size_t>(g)].weights.slice(
        row, row + tables_[static_cast<size_t>(table)].num_embeddings);
}

std::vector<Tensor> EmbeddingBagCollection::optimizer_state(int64_t table) const {
    SR_CHECK(table >= 0 && table < static_cast<int64_t>(tables_.size()), "no table {}", table);
    const auto [g, row] = table_location_[static_cast<size_t>(table)];
    const int64_t end = row + tables_[static_cast<size_t>(table)].num_embeddings;
    const Group& group = groups_[static_cast<size_t>(g)];
    std::vector<Tensor> state;
    if (group.state1.defined()) {
        state.push_back(group.state1.slice(row, end));
    }
    if (group.state2.defined()) {
        state.push_back(group.state2.slice(row, end));
    }
    return state;
}

Tensor EmbeddingBagCollection::weight_grad(int64_t table) const {
    SR_CHECK(!fused_, "weight_grad: the collection is fused (gradients are never materialised)");
    SR_CHECK(table >= 0 && table < static_cast<int64_t>(tables_.size()), "no table {}", table);
    const auto [g, row] = table_location_[static_cast<size_t>(table)];
    return groups_[static_cast<size_t>(g)].grad_weights.slice(
        row, row + tables_[static_cast<size_t>(table)].num_embeddings);
}

std::vector<EmbeddingShardState> EmbeddingBagCollection::shard_states() {
    std::vector<EmbeddingShardState> out;
    for (size_t t = 0; t < tables_.size(); ++t) {
        EmbeddingShardState s;
        s.table = static_cast<int64_t>(t);
        s.rows = tables_[t].num_embeddings;
        s.cols = tables_[t].embedding_dim;
        s.weight = weight(s.table);
        s.optimizer_state = optimizer_state(s.table);
        s.optimizer_step = fused_ ? &fused_->step : nullptr;
        out.push_back(std::move(s));
    }
    return out;
}

int64_t EmbeddingBagCollection::num_parameters() const {
    int64_t n = 0;
    for (const Group& g : groups_) {
        n += g.weights.numel();
    }
    return n;
}

int64_t EmbeddingBagCollection::parameter_bytes() const {
    int64_t n = 0;
    for (const Group& g : groups_) {
        n += static_cast<int64_t>(g.weights.nbytes());
    }
    return n;
}

int64_t EmbeddingBagCollection::optimizer_state_bytes() const {
    int64_t n = 0;
    for (const Group& g : groups_) {
        if (g.state1.defined()) {
            n += static_cast<int64_t>(g.state1.nbytes());
        }
        if (g.state2.defined()) {
            n += static_cast<int64_t>(g.state2.nbytes());
        }
    }
    return n;
}

std::vector<Parameter*> EmbeddingBagCollection::parameters() {
    std::vector<Parameter*> out;
    for (Parameter& p : dense_parameters_) {
        out.push_back(&p);
    }
    if (position_weighted_) {
        for (Parameter* p : position_weighted_->parameters())
            out.push_back(p);
    }
    return out;
}

}  // namespace shardrec
