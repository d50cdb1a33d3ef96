// The Work handle and the backend-independent group helpers.
#include "comm/process_group.h"

#include <exception>

#include "engine/core/error.h"
#include "engine/core/log.h"

namespace shardrec::comm {

// A destructor must not throw: a failed collective here is logged on this rank (a test fails on
// it; tools/main.cpp is not reached, but the peers' own waits time out and report).
namespace {

// A collective dropped without wait() still completes before its handle goes; a failure is
// logged, never thrown (destructors and move-assignment are noexcept).
void finish_dropped(std::unique_ptr<WorkImpl>& impl) {
    if (!impl) {
        return;
    }
    try {
        impl->drop();
    } catch (const std::exception& e) {
        log::all().error("a Work destroyed without wait() failed: {}", e.what());
    }
    impl.reset();
}

}  // namespace

Work::~Work() {
    finish_dropped(impl_);
}

Work& Work::operator=(Work&& other) noexcept {
    if (this != &other) {
        finish_dropped(impl_);
        impl_ = std::move(other.impl_);
    }
    return *this;
}

// The impl goes away even when wait() throws: the error is reported once, by this call, and
// neither a second wait() nor the destructor raises it again.
void Work::wait() {
    if (!impl_) {
        return;
    }
    const std::unique_ptr<WorkImpl> impl = std::move(impl_);
    impl->wait();
}

bool Work::is_completed() {
    return !impl_ || impl_->is_completed();
}

namespace {

// Checks the length and signs of splits; returns their sum.
int64_t check_splits(const char* collective,
                     const char* what,
                     const std::vector<int64_t>& splits,
                     int group_size) {
    SR_CHECK(static_cast<int64_t>(splits.size()) == group_size,
             "{}: {} has {} entries for a group of {} ranks", collective, what, splits.size(),
             group_size);
    int64_t total = 0;
    for (size_t r = 0; r < splits.size(); ++r) {
        SR_CHECK(splits[r] >= 0, "{}: {}[{}] = {} is negative", collective, what, r, splits[r]);
        total += splits[r];
    }
    return total;
}

void check_same_dtype(const char* collective, const Tensor& input, const Tensor& output) {
    SR_CHECK(input.dtype() == output.dtype(), "{}: input is {} but output is {}", collective,
             input.str(), output.str());
}

// The splits `what` of tensor `name` sum to its element count.
void check_splits_cover(const char* collective,
                        const char* what,
                        const std::vector<int64_t>& splits,
                        int group_size,
                        const char* name,
                        const Tensor& t) {
    const int64_t sum = check_splits(collective, what, splits, group_size);
    SR_CHECK(sum == t.numel(), "{}: {} sum to {} but {} is {}", collective, what, sum, name,
             t.str());
}

}  // namespace

void ProcessGroup::check_all_to_all_v(const char* collective,
                                      const Tensor& input,
                                      const std::vector<int64_t>& input_splits,
                                      const Tensor& output,
                                      const std::vector<int64_t>& output_splits) const {
    check_same_dtype(collective, input, output);
    check_splits_cover(collective, "input_splits", input_splits, size_, "input", input);
    check_splits_cover(collective, "output_splits", output_splits, size_, "output", output);
}

void ProcessGroup::check_reduce_scatter_v(const char* collective,
                                          const Tensor& input,
                                          const std::vector<int64_t>& input_splits,
                                          const Tensor& output) const {
    check_same_dtype(collective, input, output);
    check_splits_cover(collective, "input_splits", input_splits, size_, "input", input);
    const int64_t mine = input_splits[static_cast<size_t>(rank_)];
    SR_CHECK(output.numel() == mine, "{}: output is {} but input_splits[{}] = {}", collective,
             output.str(), rank_, mine);
}

void ProcessGroup::check_all_gather_v(const char* collective,
                                      const Tensor& input,
                                      const Tensor& output,
                                      const std::vector<int64_t>& output_splits) const {
    check_same_dtype(collective, input, output);
    check_splits_cover(collective, "output_splits", output_splits, size_, "output", output);
    const int64_t mine = output_splits[static_cast<size_t>(rank_)];
    SR_CHECK(input.numel() == mine, "{}: input is {} but output_splits[{}] = {}", collective,
             input.str(), rank_, mine);
}

void ProcessGroup::check_root(const char* collective, int root) const {
    SR_CHECK(root >= 0 && root < size_, "{}: root {} is not a rank of group '{}' (size {})",
             collective, root, name_, size_);
}

// TorchRec intra_and_cross_node_pg: nodes are consecutive blocks of local_size ranks.
IntraAndCrossNodeGroups intra_and_cross_node_pg(ProcessGroup& world, int local_size) {
    SR_CHECK(local_size > 0 && world.size() % local_size == 0,
             "intra_and_cross_node_pg: local size {} does not divide the group size {}", local_size,
             world.size());
    const int rank = world.rank();
    IntraAndCrossNodeGroups groups;
    // Both splits are collective over world, in this order on every rank.
    groups.intra = world.split(rank / local_size, rank, "intra_node");
    groups.cross = world.split(rank % local_size, rank, "cross_node");
    return groups;
}

}  // namespace shardrec::comm
