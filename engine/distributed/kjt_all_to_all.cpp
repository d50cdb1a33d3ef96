#include "engine/distributed/kjt_all_to_all.h"

#include <numeric>
#include <utility>

#include "engine/distributed/comm_ops.h"
#include "engine/distributed/permute_sparse_data.h"

namespace shardrec {
namespace {

// Phase 1 sends, per destination: bags, ids, my batch size, weighted flag, key count. The last
// two only guard against ranks that disagree (a mismatch would otherwise hang in phase 2).
constexpr int64_t kCounts = 5;

enum CountSlot : int64_t { kBags = 0, kIds = 1, kBatch = 2, kWeighted = 3, kNumKeys = 4 };

void check_input(const KJTAllToAllInput& in, const std::vector<int64_t>& splits) {
    const auto num_keys = static_cast<int64_t>(in.keys.size());
    const int64_t sum = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    SR_CHECK(sum == num_keys, "KJTAllToAll: splits sum to {} but the input has {} keys", sum,
             num_keys);
    SR_CHECK(in.stride >= 0, "KJTAllToAll: negative stride {}", in.stride);
    SR_CHECK(in.lengths.defined() && in.values.defined(), "KJTAllToAll: undefined input tensors");
    SR_CHECK(in.lengths.device().is_cpu() && in.values.device().is_cpu(),
             "KJTAllToAll: the MPI all-to-all needs host tensors");
    SR_CHECK(in.lengths.dtype() == DType::kI64 && in.lengths.numel() == num_keys * in.stride,
             "KJTAllToAll: lengths {} for {} keys x stride {}", in.lengths.str(), num_keys,
             in.stride);
    SR_CHECK(in.values.dtype() == DType::kI64 && in.values.dim() == 1,
             "KJTAllToAll: values must be [N] i64, got {}", in.values.str());
    if (in.weights) {
        SR_CHECK(in.weights->dtype() == DType::kF32 && in.weights->numel() == in.values.numel(),
                 "KJTAllToAll: weights {} for {} values", in.weights->str(), in.values.numel());
    }
}

}  // namespace

struct KJTAllToAllBuffers {
    Tensor send_counts, recv_counts, lengths, values, weights;
};

KJTAllToAllInput KJTAllToAllInput::from_kjt(const KeyedJaggedTensor& kjt) {
    SR_CHECK(!kjt.variable_stride_per_key(),
             "KJTAllToAll: a variable stride per key (VBE) is not supported");
    return KJTAllToAllInput{kjt.keys(), kjt.lengths(), kjt.values(), kjt.weights_or_none(),
                            kjt.stride()};
}

// ---- KJTAllToAll ----

KJTAllToAll::KJTAllToAll(std::shared_ptr<comm::ProcessGroup> pg,
                         std::vector<int64_t> splits,
                         int64_t stagger)
    : pg_(std::move(pg)), splits_(std::move(splits)), stagger_(stagger) {
    SR_CHECK(pg_ != nullptr, "KJTAllToAll: null process group");
    SR_CHECK(static_cast<int64_t>(splits_.size()) == pg_->size(),
             "KJTAllToAll: {} splits for a group of {} ranks", splits_.size(), pg_->size());
    for (int64_t s : splits_) {
        SR_CHECK(s >= 0, "KJTAllToAll: negative split {}", s);
    }
    SR_CHECK(stagger_ >= 1 && pg_->size() % stagger_ == 0,
             "KJTAllToAll: stagger {} must divide the group size {}", stagger_, pg_->size());
}

KJTAllToAllSplitsAwaitable KJTAllToAll::start(const KeyedJaggedTensor& input) const {
    return start(KJTAllToAllInput::from_kjt(input));
}

KJTAllToAllSplitsAwaitable KJTAllToAll::start(KJTAllToAllInput input) const {
    check_input(input, splits_);
    const int64_t world = pg_->size();
    KJTAllToAllSplitsAwaitable a;
    a.pg_ = pg_;
    a.key_splits_ = splits_;
    a.stagger_ = stagger_;
    a.outputs_ = outputs_;
    for (const auto& b : buffers_) {
        if (b.use_count() == 1) {
            a.buffers_ = b;
            break;
        }
    }
    if (a.buffers_ == nullptr) {
        a.buffers_ = std::make_shared<KJTAllToAllBuffers>();
        buffers_.push_back(a.buffers_);
    }
    a.send_counts_ =
        grow_prefix(a.buffers_->send_counts, world * kCounts, DType::kI64).view({world, kCounts});
    a.recv_counts_ =
        grow_prefix(a.buffers_->recv_counts, world * kCounts, DType::kI64).view({world, kCounts});
    int64_t* send = a.send_counts_.data<int64_t>();
    const int64_t* len = input.lengths.data<int64_t>();
    int64_t bag = 0;
    for (int64_t r = 0; r < world; ++r) {
        const int64_t bags = splits_[r] * input.stride;
        int64_t ids = 0;
        for (int64_t i = bag; i < bag + bags; ++i) {
            ids += len[i];
        }
        bag += bags;
        int64_t* row = send + r * kCounts;
        row[kBags] = bags;
        row[kIds] = ids;
        row[kBatch] = input.stride;
        row[kWeighted] = input.weights.has_value() ? 1 : 0;
        row[kNumKeys] = static_cast<int64_t>(input.keys.size());
    }
    a.input_ = std::move(input);
    const std::vector<int64_t> counts(static_cast<size_t>(world), kCounts);
    a.works_.push_back(pg_->all_to_all_v(a.send_counts_, counts, a.recv_counts_, counts));
    return a;
}

// ---- phase 1 ----

void KJTAllToAllSplitsAwaitable::check_received_counts(const std::vector<int64_t>& recv) const {
    const int64_t world = pg_->size();
    const int64_t me = pg_->rank();
    const int64_t* mine = send_counts_.data<int64_t>();
    for (int64_t s = 0; s < world; ++s) {
        const int64_t* row = recv.data() + s * kCounts;
        SR_CHECK(row[kWeighted] == mine[kWeighted],
                 "KJTAllToAll: rank {} sends {} features but rank {} sends {} features", s,
                 row[kWeighted] ? "weighted" : "unweighted", me,
                 mine[kWeighted] ? "weighted" : "unweighted");
        SR_CHECK(row[kNumKeys] == mine[kNumKeys],
                 "KJTAllToAll: rank {} sends {} keys but rank {} sends {}", s, row[kNumKeys], me,
                 mine[kNumKeys]);
        SR_CHECK(row[kBags] == key_splits_[me] * row[kBatch] && row[kIds] >= 0,
                 "KJTAllToAll: rank {} sends {} bags and {} ids for {} keys x batch {}", s,
                 row[kBags], row[kIds], key_splits_[me], row[kBatch]);
    }
}

KJTAllToAllTensorsAwaitable KJTAllToAllSplitsAwaitable::tensors() {
    SR_CHECK(!started_tensors_, "KJTAllToAllSplitsAwaitable: tensors() was already called");
    started_tensors_ = true;
    for (comm::Work& w : works_) {
        w.wait();
    }
    works_.clear();
    const std::vector<int64_t> recv = recv_counts_.to_vector<int64_t>();
    check_received_counts(recv);
    const int64_t world = pg_->size();
    const int64_t* send = send_counts_.data<int64_t>();
    splits_ = KJTAllToAllSplits{};
    for (int64_t r = 0; r < world; ++r) {
        splits_.stride_per_rank.push_back(recv[r * kCounts + kBatch]);
        splits_.lengths_input_splits.push_back(send[r * kCounts + kBags]);
        splits_.lengths_output_splits.push_back(recv[r * kCounts + kBags]);
        splits_.values_input_splits.push_back(send[r * kCounts + kIds]);
        splits_.values_output_splits.push_back(recv[r * kCounts + kIds]);
    }
    const auto total = [](const std::vector<int64_t>& v) {
        return std::accumulate(v.begin(), v.end(), int64_t{0});
    };

    KJTAllToAllTensorsAwaitable t;
    const int64_t me = pg_->rank();
    const int64_t key_begin =
        std::accumulate(key_splits_.begin(), key_splits_.begin() + me, int64_t{0});
    t.keys_.assign(input_.keys.begin() + key_begin,
                   input_.keys.begin() + key_begin + key_splits_[me]);
    t.stagger_ = stagger_;
    t.splits_ = splits_;
    t.buffers_ = std::move(buffers_);
    t.outputs_ = std::move(outputs_);
    t.recv_lengths_ =
        grow_prefix(t.buffers_->lengths, total(splits_.lengths_output_splits), DType::kI64);
    t.recv_values_ =
        grow_prefix(t.buffers_->values, total(splits_.values_output_splits), DType::kI64);
    // All three in flight together (TorchRec KJTAllToAllTensorsAwaitable).
    t.works_.push_back(pg_->all_to_all_v(input_.lengths, splits_.lengths_input_splits,
                                         t.recv_lengths_, splits_.lengths_output_splits));
    t.works_.push_back(pg_->all_to_all_v(input_.values, splits_.values_input_splits, t.recv_values_,
                                         splits_.values_output_splits));
    if (input_.weights) {
        t.recv_weights_ = grow_prefix(t.buffers_->weights, t.recv_values_.numel(), DType::kF32);
        t.works_.push_back(pg_->all_to_all_v(*input_.weights, splits_.values_input_splits,
                                             *t.recv_weights_, splits_.values_output_splits));
    }
    t.input_ = std::move(input_);
    return t;
}

KeyedJaggedTensor KJTAllToAllSplitsAwaitable::wait() {
    return tensors().wait();
}

const KJTAllToAllSplits& KJTAllToAllSplitsAwaitable::splits() const {
    SR_CHECK(started_tensors_, "KJTAllToAllSplitsAwaitable: splits() before phase 1 completed");
    return splits_;
}

// ---- phase 2 ----

KeyedJaggedTensor KJTAllToAllTensorsAwaitable::wait() {
    SR_CHECK(!waited_, "KJTAllToAllTensorsAwaitable: wait() was already called");
    waited_ = true;
    for (comm::Work& w : works_) {
        w.wait();
    }
    works_.clear();
    const auto world = static_cast<int64_t>(splits_.stride_per_rank.size());
    const auto local_keys = static_cast<int64_t>(keys_.size());
    // Received segment s * local_keys + f holds source rank s's batch of local key f.
    std::vector<int64_t> segment_sizes;
    segment_sizes.reserve(static_cast<size_t>(world * local_keys));
    for (int64_t s = 0; s < world; ++s) {
        for (int64_t f = 0; f < local_keys; ++f) {
            segment_sizes.push_back(splits_.stride_per_rank[s]);
        }
    }
    KJTBuffers& out = outputs_->acquire();
    Tensor lengths = grow_prefix(out.lengths, recv_lengths_.numel(), DType::kI64);
    Tensor values = grow_prefix(out.values, recv_values_.numel(), DType::kI64);
    std::optional<Tensor> weights;
    if (recv_weights_) {
        weights = grow_prefix(out.weights, recv_weights_->numel(), DType::kF32);
    }
    permute_sparse_data(get_recat(local_keys, world, stagger_), segment_sizes, recv_lengths_,
                        recv_values_, recv_weights_ ? &*recv_weights_ : nullptr, lengths, values,
                        weights ? &*weights : nullptr);
    const int64_t stride =
        std::accumulate(splits_.stride_per_rank.begin(), splits_.stride_per_rank.end(), int64_t{0});
    input_ = KJTAllToAllInput{};  // the sends are complete
    recv_lengths_ = recv_values_ = Tensor();
    recv_weights_.reset();
    buffers_.reset();  // recat: a later all-to-all may reuse them
    return KeyedJaggedTensor::from_lengths_sync(keys_, std::move(values), std::move(lengths),
                                                std::move(weights), stride, &out.offsets);
}

}  // namespace shardrec
